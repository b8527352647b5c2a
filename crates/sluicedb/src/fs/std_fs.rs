//! [`Fs`] on the operating system's file system.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{CachedRead, FileLock, FileSyncer, Fs, RandomAccessFile, WritableFile};
use crate::error::{Error, Result};

/// The real file system. Appends go through a 64 KiB user-space buffer that
/// `sync` (and drop) flush, so small journal records cost no system call each.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

const WRITE_BUFFER_BYTES: usize = 64 * 1024;

struct StdWritable {
    /// Shared with the file's syncers: `fdatasync` through any descriptor
    /// of the file covers all of its written data.
    file: Arc<File>,
    path: PathBuf,
    buf: Vec<u8>,
    len: u64,
    /// Where the next writeback start begins.
    written_back: u64,
}

impl StdWritable {
    fn flush_buf(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            (&*self.file)
                .write_all(&self.buf)
                .map_err(|e| Error::io("write", &self.path, e))?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Starts writing bytes `from..to` of `file` back to the disk without
/// waiting (Linux's `sync_file_range(SYNC_FILE_RANGE_WRITE)`; elsewhere
/// nothing). A hint: a failure changes nothing, as the sync that follows
/// writes the pages and reports any error.
pub fn start_writeback(file: &File, from: u64, to: u64) {
    #[cfg(target_os = "linux")]
    if to > from {
        use std::os::fd::AsRawFd;
        // SAFETY: sync_file_range only reads its integer arguments; the
        // descriptor is open for as long as `file` is borrowed.
        let _ = unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                from as libc::off64_t,
                (to - from) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, from, to);
}

/// Writes all of `parts`, in order, in as few `writev` calls as the
/// kernel takes them (`Write::write_all_vectored` is not stable yet).
fn write_all_vectored(mut file: &File, parts: &[&[u8]]) -> std::io::Result<()> {
    use std::io::IoSlice;
    // Empty parts left out, so that a write of nothing never reads as
    // the file refusing bytes.
    let mut slices: Vec<IoSlice<'_>> = (parts.iter())
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match file.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl WritableFile for StdWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        if self.buf.len() + data.len() > WRITE_BUFFER_BYTES {
            self.flush_buf()?;
        }
        if data.len() >= WRITE_BUFFER_BYTES {
            (&*self.file)
                .write_all(data)
                .map_err(|e| Error::io("write", &self.path, e))?;
        } else {
            self.buf.extend_from_slice(data);
        }
        self.len += data.len() as u64;
        Ok(())
    }
    /// Small records are gathered in the buffer as `append` gathers them;
    /// one of a buffer's size or more goes to the file in one `writev`
    /// from the caller's slices, copied by no one but the kernel.
    fn append_parts(&mut self, parts: &[&[u8]]) -> Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if self.buf.len() + total > WRITE_BUFFER_BYTES {
            self.flush_buf()?;
        }
        if total >= WRITE_BUFFER_BYTES {
            write_all_vectored(&self.file, parts).map_err(|e| Error::io("write", &self.path, e))?;
        } else {
            parts.iter().for_each(|p| self.buf.extend_from_slice(p));
        }
        self.len += total as u64;
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.flush_buf()
    }
    fn start_writeback(&mut self) {
        if self.flush_buf().is_err() {
            return; // the next append or sync reports it
        }
        start_writeback(&self.file, self.written_back, self.len);
        self.written_back = self.len;
    }
    fn sync(&mut self) -> Result<()> {
        self.flush_buf()?;
        self.file
            .sync_data()
            .map_err(|e| Error::io("sync", &self.path, e))
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn syncer(&self) -> Result<Arc<dyn FileSyncer>> {
        Ok(Arc::new(StdSyncer {
            file: self.file.clone(),
            path: self.path.clone(),
        }))
    }
}

/// Bytes a direct writer gathers before one `O_DIRECT` write.
#[cfg(target_os = "linux")]
const DIRECT_WRITE_BYTES: usize = 1 << 20;

/// A [`DIRECT_WRITE_BYTES`] buffer aligned to [`DIRECT_ALIGN`]: an aligned
/// window inside a plain allocation, which moving between threads keeps.
#[cfg(target_os = "linux")]
struct AlignedBuf {
    raw: Vec<u8>,
    skew: usize,
}

#[cfg(target_os = "linux")]
impl AlignedBuf {
    fn new() -> AlignedBuf {
        let raw = vec![0u8; DIRECT_WRITE_BYTES + DIRECT_ALIGN];
        let skew = raw.as_ptr().align_offset(DIRECT_ALIGN);
        AlignedBuf { raw, skew }
    }
    fn bytes(&mut self) -> &mut [u8] {
        &mut self.raw[self.skew..self.skew + DIRECT_WRITE_BYTES]
    }
}

/// The thread that writes a direct writer's full buffers while the next
/// one fills, and hands each back with the write's outcome.
#[cfg(target_os = "linux")]
struct BackgroundWrites {
    to_thread: std::sync::mpsc::SyncSender<(AlignedBuf, u64)>,
    /// In a mutex only because a `Receiver` is not `Sync` (the writer
    /// alone uses it).
    from_thread: std::sync::Mutex<std::sync::mpsc::Receiver<(AlignedBuf, std::io::Result<()>)>>,
    thread: std::thread::JoinHandle<()>,
}

#[cfg(target_os = "linux")]
impl BackgroundWrites {
    fn start(file: Arc<File>) -> std::io::Result<BackgroundWrites> {
        let (to_thread, jobs) = std::sync::mpsc::sync_channel::<(AlignedBuf, u64)>(1);
        let (done, from_thread) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("sluicedb-direct".into())
            .spawn(move || {
                for (mut buf, at) in jobs {
                    let r = file.write_all_at(buf.bytes(), at);
                    if done.send((buf, r)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(BackgroundWrites {
            to_thread,
            from_thread: std::sync::Mutex::new(from_thread),
            thread,
        })
    }
}

/// A writer around the page cache ([`Fs::create_uncached`]): appends
/// gather in a 4 KiB-aligned buffer and go to the device in aligned
/// `O_DIRECT` writes of [`DIRECT_WRITE_BYTES`]. A full buffer is written by
/// a thread of the file's own while the next one fills (two buffers, one
/// write in flight), so that the writer's work overlaps the device's:
/// with synchronous writes a flush spent 35 of its 74 ms appending values
/// (Mixed workload at 2 GiB). The bytes past the last whole block, when
/// `flush` or `sync` must hand them over, are written (after the write in
/// flight) through an ordinary descriptor and stay in the buffer: the next
/// direct write rewrites their block whole.
#[cfg(target_os = "linux")]
struct DirectWritable {
    /// Opened with `O_DIRECT`.
    direct: Arc<File>,
    /// The same file, buffered: for the unaligned tail.
    plain: File,
    path: PathBuf,
    /// The buffer being filled.
    buf: AlignedBuf,
    /// Bytes in the buffer; they belong at `on_disk + in_flight`.
    fill: usize,
    /// The file's bytes before the buffer and the write in flight: a
    /// multiple of 4 KiB, written.
    on_disk: u64,
    /// Bytes of the write in flight (0 or [`DIRECT_WRITE_BYTES`]).
    in_flight: u64,
    /// The other buffer, when no write holds it.
    spare: Option<AlignedBuf>,
    /// Started at the first full buffer; `None` after a failed start
    /// (writes are then synchronous).
    background: Option<BackgroundWrites>,
    started: bool,
    /// A background write failed: its bytes are lost, so every later
    /// call fails.
    failed: bool,
}

#[cfg(target_os = "linux")]
impl DirectWritable {
    /// Waits for the write in flight and takes its buffer back.
    fn wait(&mut self) -> Result<()> {
        if self.failed {
            return Err(self.stopped("an earlier write failed"));
        }
        if self.in_flight == 0 {
            return Ok(());
        }
        let Some(bg) = &self.background else {
            unreachable!("a write in flight has a thread");
        };
        let got = bg
            .from_thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv();
        let n = std::mem::take(&mut self.in_flight);
        let Ok((buf, r)) = got else {
            self.failed = true;
            return Err(self.stopped("the direct-write thread stopped"));
        };
        self.spare = Some(buf);
        if let Err(e) = r {
            // The buffer's bytes are gone: no later write may land.
            self.failed = true;
            return Err(Error::io("write", &self.path, e));
        }
        self.on_disk += n;
        Ok(())
    }

    fn stopped(&self, why: &str) -> Error {
        Error::io("write", &self.path, std::io::Error::other(why.to_string()))
    }

    /// Hands the full buffer to the write thread and takes the spare.
    fn write_full(&mut self) -> Result<()> {
        debug_assert_eq!(self.fill, DIRECT_WRITE_BYTES);
        if !self.started {
            self.started = true;
            self.background = BackgroundWrites::start(self.direct.clone()).ok();
        }
        if self.background.is_none() {
            return self.write_blocks();
        }
        self.wait()?;
        let next = self.spare.take().unwrap_or_else(AlignedBuf::new);
        let full = std::mem::replace(&mut self.buf, next);
        let at = self.on_disk;
        let Some(bg) = &self.background else {
            unreachable!("checked above");
        };
        if bg.to_thread.send((full, at)).is_err() {
            self.failed = true;
            return Err(self.stopped("the direct-write thread stopped"));
        }
        self.in_flight = DIRECT_WRITE_BYTES as u64;
        self.fill = 0;
        Ok(())
    }

    /// Writes the buffer's whole blocks with `O_DIRECT`, after the write
    /// in flight, and keeps the rest.
    fn write_blocks(&mut self) -> Result<()> {
        self.wait()?;
        let whole = self.fill / DIRECT_ALIGN * DIRECT_ALIGN;
        if whole == 0 {
            return Ok(());
        }
        let at = self.on_disk;
        self.direct
            .write_all_at(&self.buf.bytes()[..whole], at)
            .map_err(|e| Error::io("write", &self.path, e))?;
        let fill = self.fill;
        self.buf.bytes().copy_within(whole..fill, 0);
        self.fill -= whole;
        self.on_disk += whole as u64;
        Ok(())
    }

    /// Hands every byte to the file system: whole blocks directly, the
    /// tail through the buffered descriptor (kept in the buffer).
    fn write_out(&mut self) -> Result<()> {
        self.write_blocks()?;
        if self.fill > 0 {
            let (at, fill) = (self.on_disk, self.fill);
            let tail = self.buf.bytes()[..fill].to_vec();
            self.plain
                .write_all_at(&tail, at)
                .map_err(|e| Error::io("write", &self.path, e))?;
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
impl WritableFile for DirectWritable {
    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = data.len().min(DIRECT_WRITE_BYTES - self.fill);
            let fill = self.fill;
            self.buf.bytes()[fill..fill + n].copy_from_slice(&data[..n]);
            self.fill += n;
            data = &data[n..];
            if self.fill == DIRECT_WRITE_BYTES {
                self.write_full()?;
            }
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.write_out()
    }
    fn sync(&mut self) -> Result<()> {
        self.write_out()?;
        self.direct
            .sync_data()
            .map_err(|e| Error::io("sync", &self.path, e))
    }
    fn len(&self) -> u64 {
        self.on_disk + self.in_flight + self.fill as u64
    }
    fn syncer(&self) -> Result<Arc<dyn FileSyncer>> {
        Ok(Arc::new(StdSyncer {
            file: self.direct.clone(),
            path: self.path.clone(),
        }))
    }
}

#[cfg(target_os = "linux")]
impl Drop for DirectWritable {
    fn drop(&mut self) {
        // Best effort, as for buffered files.
        let _ = self.write_out();
        if let Some(bg) = self.background.take() {
            drop(bg.to_thread);
            let _ = bg.thread.join();
        }
    }
}

struct StdSyncer {
    file: Arc<File>,
    path: PathBuf,
}

impl FileSyncer for StdSyncer {
    fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("sync", &self.path, e))
    }
}

impl Drop for StdWritable {
    fn drop(&mut self) {
        // Best effort: unsynced data carries no durability promise anyway.
        let _ = self.flush_buf();
    }
}

struct StdReadable {
    file: File,
    path: PathBuf,
    len: u64,
    /// `preadv2(RWF_NOWAIT)` was refused once: the file system cannot tell.
    #[cfg(target_os = "linux")]
    no_nowait: std::sync::atomic::AtomicBool,
    /// A second descriptor opened with `O_DIRECT` at the first uncached
    /// read; `None` where the file system refuses it.
    #[cfg(target_os = "linux")]
    direct: std::sync::OnceLock<Option<File>>,
}

/// The alignment `O_DIRECT` asks of offsets, lengths and buffers: 4 KiB
/// covers every logical block size in use.
#[cfg(target_os = "linux")]
const DIRECT_ALIGN: usize = 4096;

impl StdReadable {
    /// Reads `offset..offset + len` through the `O_DIRECT` descriptor: the
    /// 4 KiB-aligned blocks around it into an aligned window of `raw`
    /// (grown when too short, never shrunk: a caller that keeps it reads
    /// with no allocation and no page faults), returning where in `raw` the
    /// asked bytes start. `None` when direct reads are not possible here
    /// (no descriptor, or the file system refused the read).
    #[cfg(target_os = "linux")]
    fn read_direct(&self, offset: u64, len: usize, raw: &mut Vec<u8>) -> Option<Result<usize>> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = self
            .direct
            .get_or_init(|| {
                OpenOptions::new()
                    .read(true)
                    .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
                    .open(&self.path)
                    .ok()
            })
            .as_ref()?;
        let align = DIRECT_ALIGN as u64;
        let start = offset / align * align;
        let want_end = offset + len as u64;
        let end = want_end.div_ceil(align) * align;
        let span = (end - start) as usize;
        // An aligned window inside a plain buffer: no allocator tricks.
        grow_exact(raw, span + DIRECT_ALIGN);
        let skew = raw.as_ptr().align_offset(DIRECT_ALIGN);
        let buf = &mut raw[skew..skew + span];
        let mut got = 0usize;
        while got < span {
            match file.read_at(&mut buf[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Refused (an unaligned device, a file system without
                // direct I/O for this file): the caller reads it cached.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    return None
                }
                Err(e) => return Some(Err(Error::io("read", &self.path, e))),
            }
            // A read that ends off the alignment met the end of the file.
            if !got.is_multiple_of(DIRECT_ALIGN) {
                break;
            }
        }
        if (start + got as u64) < want_end {
            return Some(Err(Error::io(
                "read",
                &self.path,
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            )));
        }
        Some(Ok(skew + (offset - start) as usize))
    }
}

impl RandomAccessFile for StdReadable {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.read_at_into(offset, len, &mut buf)?;
        Ok(buf)
    }
    /// Reads into `buf`'s spare capacity, never zeroing it first: zeroing
    /// fresh buffers for every block and GC window read was 2–3% of a
    /// separated preset's CPU (`_mi_page_malloc_zero`, `clear_page`).
    fn read_at_into(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> Result<()> {
        use rustix::io::{pread, Errno};
        buf.clear();
        // Exact: a reused buffer sized by doubling held up to twice the
        // largest read (`grow_exact`).
        buf.reserve_exact(len);
        while buf.len() < len {
            let at = buf.len();
            let spare = &mut buf.spare_capacity_mut()[..len - at];
            match pread(&self.file, spare, offset + at as u64) {
                Ok(([], _)) => {
                    let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                    return Err(Error::io("read", &self.path, eof));
                }
                Ok((read, _)) => {
                    let n = read.len();
                    // SAFETY: `pread` initialised the `n` bytes after `at`.
                    unsafe { buf.set_len(at + n) };
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("read", &self.path, e.into())),
            }
        }
        Ok(())
    }
    /// One `preadv2` with `RWF_NOWAIT` (Linux 4.14+): it returns only what
    /// the page cache holds, so a short read or `EAGAIN` means the rest
    /// would wait on the device.
    #[cfg(target_os = "linux")]
    fn read_at_cached(&self, offset: u64, len: usize) -> Result<CachedRead> {
        use rustix::io::{preadv2, Errno, ReadWriteFlags};
        use std::sync::atomic::Ordering;
        if len == 0 {
            return Ok(CachedRead::Data(Vec::new()));
        }
        if self.no_nowait.load(Ordering::Relaxed) {
            return Ok(CachedRead::Unsupported);
        }
        let mut buf = vec![0u8; len];
        let mut bufs = [std::io::IoSliceMut::new(&mut buf)];
        match preadv2(&self.file, &mut bufs, offset, ReadWriteFlags::NOWAIT) {
            Ok(n) if n == len => Ok(CachedRead::Data(buf)),
            Ok(_) | Err(Errno::AGAIN) | Err(Errno::INTR) => Ok(CachedRead::WouldWait),
            Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::INVAL) => {
                self.no_nowait.store(true, Ordering::Relaxed);
                Ok(CachedRead::Unsupported)
            }
            Err(e) => Err(Error::io("read", &self.path, e.into())),
        }
    }
    /// Through a second descriptor opened with `O_DIRECT`; a cached read
    /// where the file system refuses direct I/O.
    fn read_at_uncached(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        let at = self.read_at_uncached_into(offset, len, &mut buf)?;
        buf.truncate(at + len);
        buf.drain(..at);
        Ok(buf)
    }
    /// Through a second descriptor opened with `O_DIRECT` into `buf`'s
    /// aligned window; a cached read into `buf` where the file system
    /// refuses direct I/O.
    fn read_at_uncached_into(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> Result<usize> {
        #[cfg(target_os = "linux")]
        if let Some(r) = self.read_direct(offset, len, buf) {
            return r;
        }
        grow_exact(buf, len);
        self.file
            .read_exact_at(&mut buf[..len], offset)
            .map_err(|e| Error::io("read", &self.path, e))?;
        Ok(0)
    }
    /// The length now (one `fstat`), as `MemFs` reports it: a value store
    /// head grows while its reader is cached. Should `fstat` fail, the
    /// length at open.
    fn len(&self) -> u64 {
        self.file.metadata().map_or(self.len, |m| m.len())
    }
}

/// Makes `buf` at least `len` bytes long (zeros past its old length),
/// growing its allocation to exactly that: buffers that callers keep and
/// read into again (GC's victim cursors, `CoalescedReader`) grew by
/// doubling, so a read a little longer than the one before took twice
/// the bytes, and four cursors of up to 4 MiB runs held 25 MiB where 16
/// would do (heaptrack on the scavenger preset's update benchmark).
fn grow_exact(buf: &mut Vec<u8>, len: usize) {
    if buf.len() < len {
        buf.reserve_exact(len - buf.len());
        buf.resize(len, 0);
    }
}

/// The lock files this process holds (by absolute path). A POSIX record
/// lock does not conflict within its own process, and any close of the
/// file by the process releases it, so a second handle is refused here,
/// before it opens the file.
static LOCKED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A database's lock: a POSIX record lock (`fcntl(F_SETLK)`) on the whole
/// LOCK file, held while the file is open, and the path in [`LOCKED`].
/// Not `flock`: a process that forks (a test harness spawning a command,
/// say) while some thread holds a database open lends the child its open
/// file, and a `flock` lock then outlives the handle's close until the
/// child execs, so a reopen right after a close failed as locked (8 of 80
/// runs of the CLI tests with the CPU busy). Record locks are not
/// inherited across `fork`.
struct StdLock {
    path: PathBuf,
    file: Option<File>,
}
impl FileLock for StdLock {}

impl Drop for StdLock {
    fn drop(&mut self) {
        let mut held = LOCKED.lock().unwrap_or_else(|p| p.into_inner());
        // Closed (the record lock goes with it) before the path is free:
        // a handle that locked it again in between would lose its lock to
        // this close.
        drop(self.file.take());
        held.retain(|p| p != &self.path);
    }
}

/// The key of `path` in [`LOCKED`]: its directory resolved (symbolic
/// links, `..`), so that two spellings of one database are one key.
fn lock_key(path: &Path) -> std::io::Result<PathBuf> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = std::fs::canonicalize(dir.unwrap_or(Path::new(".")))?;
    Ok(match path.file_name() {
        Some(name) => dir.join(name),
        None => dir,
    })
}

/// Takes a write lock on the whole of `file` without waiting; false when
/// another process holds one.
fn try_record_lock(file: &File) -> std::io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: `flock` is plain data, zero is a valid value for every field.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // l_start = 0, l_len = 0: the whole file, however long.
    // SAFETY: a valid open descriptor and a pointer to an initialised
    // `flock` that outlives the call.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EAGAIN) => Ok(false),
        _ => Err(e),
    }
}

impl Fs for StdFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io("create", path, e))?;
        Ok(Box::new(StdWritable {
            file: Arc::new(file),
            path: path.to_path_buf(),
            buf: Vec::with_capacity(WRITE_BUFFER_BYTES),
            len: 0,
            written_back: 0,
        }))
    }
    /// With `O_DIRECT` where the file system allows it (not tmpfs, say);
    /// an ordinary file otherwise.
    #[cfg(target_os = "linux")]
    fn create_uncached(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(path);
        let Ok(direct) = direct else {
            return self.create(path);
        };
        let plain = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io("create", path, e))?;
        Ok(Box::new(DirectWritable {
            direct: Arc::new(direct),
            plain,
            path: path.to_path_buf(),
            buf: AlignedBuf::new(),
            fill: 0,
            on_disk: 0,
            in_flight: 0,
            spare: None,
            background: None,
            started: false,
            failed: false,
        }))
    }
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let file = File::open(path).map_err(|e| Error::io("open", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat", path, e))?
            .len();
        Ok(Arc::new(StdReadable {
            file,
            path: path.to_path_buf(),
            len,
            #[cfg(target_os = "linux")]
            no_nowait: std::sync::atomic::AtomicBool::new(false),
            #[cfg(target_os = "linux")]
            direct: std::sync::OnceLock::new(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }
    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io("remove", path, e))
    }
    fn remove_dir(&self, dir: &Path) -> Result<()> {
        std::fs::remove_dir(dir).map_err(|e| Error::io("rmdir", dir, e))
    }
    fn link(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::hard_link(from, to).map_err(|e| Error::io("link", to, e))
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let entry = entry.map_err(|e| Error::io("list", dir, e))?;
            if let Some(name) = entry.file_name().to_str() {
                out.push(name.to_string());
            }
        }
        Ok(out)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))
    }
    fn open_pm(&self, path: &Path, len_bytes: u64) -> Result<Arc<dyn crate::pm::Pm>> {
        self.open_pm_fenced(path, len_bytes, crate::pm::FenceMode::Msync)
    }
    fn open_pm_fenced(
        &self,
        path: &Path,
        len_bytes: u64,
        fence: crate::pm::FenceMode,
    ) -> Result<Arc<dyn crate::pm::Pm>> {
        Ok(Arc::new(crate::pm::MmapPm::open(path, len_bytes, fence)?))
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("sync_dir", dir, e))
    }
    fn sync_file(&self, path: &Path) -> Result<()> {
        // fdatasync works on a descriptor opened for reading.
        File::open(path)
            .and_then(|f| f.sync_data())
            .map_err(|e| Error::io("sync", path, e))
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let locked = || Error::Locked(path.parent().unwrap_or(path).to_path_buf());
        let key = lock_key(path).map_err(|e| Error::io("lock", path, e))?;
        // Held across the open and the lock, so that two handles of this
        // process never both get past it.
        let mut held = LOCKED.lock().unwrap_or_else(|p| p.into_inner());
        if held.contains(&key) {
            return Err(locked());
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("lock", path, e))?;
        match try_record_lock(&file) {
            Ok(true) => {
                held.push(key.clone());
                Ok(Box::new(StdLock {
                    path: key,
                    file: Some(file),
                }))
            }
            Ok(false) => Err(locked()),
            Err(e) => Err(Error::io("lock", path, e)),
        }
    }
    fn allocated_len(&self, path: &Path) -> Result<u64> {
        let m = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
        Ok(m.blocks() * 512)
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
        use rustix::fs::{fallocate, FallocateFlags};
        use rustix::io::Errno;
        use std::os::unix::fs::MetadataExt;
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        // Another name (a checkpoint's link) shares these blocks.
        let meta = f.metadata().map_err(|e| Error::io("stat", path, e))?;
        if meta.nlink() > 1 {
            return Ok(false);
        }
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        match fallocate(&f, flags, offset, len) {
            Ok(()) => Ok(true),
            Err(Errno::OPNOTSUPP | Errno::NOSYS) => Ok(false),
            Err(e) => Err(Error::io("fallocate", path, e.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child (only async-signal-safe calls): 0 when a new open
    /// of `path` cannot take the record lock, 1 when it can, 2 on error.
    fn child_tries_lock(path: &std::ffi::CStr) -> i32 {
        // SAFETY: plain system calls on a path and a zeroed `flock`.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDWR);
            if fd < 0 {
                return 2;
            }
            let mut fl: libc::flock = std::mem::zeroed();
            fl.l_type = libc::F_WRLCK as libc::c_short;
            fl.l_whence = libc::SEEK_SET as libc::c_short;
            if libc::fcntl(fd, libc::F_SETLK, &fl) == 0 {
                1
            } else {
                0
            }
        }
    }

    /// Forks; the child runs `f` and exits with its code; returns it.
    fn in_child(f: impl FnOnce() -> i32) -> i32 {
        // SAFETY: the child makes only async-signal-safe calls and exits
        // with `_exit`.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                libc::_exit(f());
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            libc::WEXITSTATUS(status)
        }
    }

    /// The lock keeps other processes and other handles of this one out,
    /// under any spelling of the path, and a child forked while it is held
    /// does not keep it after this process lets go (the `flock` lock did,
    /// until the child exec'd: reopens right after a close failed as
    /// locked in the CLI tests).
    #[test]
    fn the_lock_excludes_other_processes_and_handles_and_is_not_inherited() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let fs = StdFs;
        let lock = fs.lock(&path).unwrap();
        assert_eq!(
            in_child(|| child_tries_lock(&c_path)),
            0,
            "another process got it"
        );
        let other = dir.path().join(".").join("LOCK");
        assert!(matches!(fs.lock(&other), Err(Error::Locked(_))));
        // A child forked now outlives the lock's release.
        // SAFETY: the child only sleeps and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: async-signal-safe calls only.
            unsafe {
                libc::usleep(500_000);
                libc::_exit(0);
            }
        }
        drop(lock);
        let again = fs.lock(&path);
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let again = again.expect("relocked while a child forked under the old lock lives");
        assert_eq!(in_child(|| child_tries_lock(&c_path)), 0);
        drop(again);
        assert_eq!(in_child(|| child_tries_lock(&c_path)), 1, "released");
    }

    /// A punched hole keeps the length, reads as zeros and is no longer
    /// allocated; where the file system cannot punch, nothing changes.
    #[test]
    fn a_punched_hole_reads_zeros_and_frees_its_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let fs = StdFs;
        let mut f = fs.create(&path).unwrap();
        f.append(&[7u8; 16384]).unwrap();
        f.sync().unwrap();
        drop(f);
        let before = fs.allocated_len(&path).unwrap();
        let punched = fs.punch_hole(&path, 4096, 8192).unwrap();
        let data = fs.read_all(&path).unwrap();
        assert_eq!(data.len(), 16384, "same length");
        if punched {
            assert!(data[4096..12288].iter().all(|&b| b == 0));
            assert!(fs.allocated_len(&path).unwrap() <= before - 8192);
        } else {
            assert!(data.iter().all(|&b| b == 7));
        }
        assert!(data[..4096].iter().chain(&data[12288..]).all(|&b| b == 7));
    }

    /// Reads into a reused buffer hold exactly the bytes asked for, longer
    /// or shorter than the last read (its spare capacity is never
    /// zeroed, so nothing of an earlier read may show); one past the end
    /// is an error and names the file.
    #[test]
    fn reads_into_a_reused_buffer_hold_exactly_the_bytes_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = StdFs.create(&path).unwrap();
        w.append(&data).unwrap();
        w.sync().unwrap();
        let r = StdFs.open(&path).unwrap();
        let mut buf = vec![0xAA; 64];
        for (offset, len) in [(0, 10_000), (17, 3), (9_000, 1_000), (1, 0), (4_096, 5_000)] {
            r.read_at_into(offset, len, &mut buf).unwrap();
            assert_eq!(buf, &data[offset as usize..offset as usize + len]);
        }
        assert_eq!(r.read_at(9_990, 10).unwrap(), &data[9_990..]);
        let err = r.read_at_into(9_990, 11, &mut buf).unwrap_err();
        assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
        assert!(r.read_at(10_001, 1).is_err());
    }

    /// Bytes just written are in the page cache: a read that must not
    /// wait returns them (or the file system cannot tell); bytes past the
    /// end never come back as data.
    #[test]
    fn cached_reads_return_cached_bytes_and_nothing_past_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = StdFs.create(&path).unwrap();
        w.append(b"hello, page cache").unwrap();
        w.sync().unwrap();
        let r = StdFs.open(&path).unwrap();
        match r.read_at_cached(7, 10).unwrap() {
            CachedRead::Data(d) => assert_eq!(d, b"page cache"),
            CachedRead::Unsupported => {}
            CachedRead::WouldWait => panic!("bytes just written are cached"),
        }
        assert!(!matches!(
            r.read_at_cached(7, 100).unwrap(),
            CachedRead::Data(_)
        ));
    }

    /// Parts appended together land as their concatenation would, in
    /// order with plain appends around them, whether they are gathered in
    /// the buffer or written by `writev` (a buffer's size or more).
    #[test]
    fn appended_parts_read_back_as_their_concatenation() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let mut w = StdFs.create(&path).unwrap();
        let mut want = Vec::new();
        for i in 0..120 {
            let parts: Vec<Vec<u8>> = (0..rng.gen_range(0..40))
                .map(|_| {
                    let n = match rng.gen_range(0..4) {
                        0 => 0,
                        1 => rng.gen_range(1..8),
                        2 => rng.gen_range(1..2000),
                        _ => rng.gen_range(1..40_000),
                    };
                    (0..n).map(|_| rng.gen()).collect()
                })
                .collect();
            let slices: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
            w.append_parts(&slices).unwrap();
            parts.iter().for_each(|p| want.extend_from_slice(p));
            if i % 3 == 0 {
                let piece: Vec<u8> = (0..rng.gen_range(0..3000)).map(|_| rng.gen()).collect();
                w.append(&piece).unwrap();
                want.extend_from_slice(&piece);
            }
            assert_eq!(w.len(), want.len() as u64, "seed {seed}");
            if i % 29 == 0 {
                w.flush().unwrap();
                assert!(
                    StdFs.read_all(&path).unwrap() == want,
                    "seed {seed}: at {i}"
                );
            }
        }
        w.sync().unwrap();
        assert!(StdFs.read_all(&path).unwrap() == want, "seed {seed}");
    }

    /// A file written with `create_uncached` in pieces of every size,
    /// across blocks and the 1 MiB direct window, handed over midway
    /// (`flush`, whose tail goes through the page cache and is rewritten
    /// by the next direct write), appended to after a sync, and closed,
    /// reads back exactly; uncached reads of any range agree with cached
    /// ones, and one past the end is an error.
    #[test]
    fn uncached_writes_and_reads_give_back_the_bytes() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut w = StdFs.create_uncached(&path).unwrap();
        let mut want = Vec::new();
        for i in 0..200 {
            let n = match i % 4 {
                0 => rng.gen_range(0..64),
                1 => rng.gen_range(4000..4200),
                2 => rng.gen_range(0..70_000),
                _ => rng.gen_range(0..(1 << 20) + 5000),
            };
            let piece: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            w.append(&piece).unwrap();
            want.extend_from_slice(&piece);
            assert_eq!(w.len(), want.len() as u64, "seed {seed}");
            if i % 37 == 0 {
                w.flush().unwrap();
                let seen = StdFs.read_all(&path).unwrap();
                assert!(seen == want, "seed {seed}: after a flush at {}", want.len());
            }
            if i == 100 {
                w.sync().unwrap();
            }
        }
        w.sync().unwrap();
        drop(w);
        let r = StdFs.open(&path).unwrap();
        assert_eq!(r.len(), want.len() as u64, "seed {seed}");
        assert!(StdFs.read_all(&path).unwrap() == want, "seed {seed}");
        // One buffer reused across reads of every size, as GC's cursors do.
        let mut buf = Vec::new();
        for _ in 0..200 {
            let at = rng.gen_range(0..want.len());
            let len = rng.gen_range(0..(want.len() - at).min(3 << 20));
            let got = r.read_at_uncached(at as u64, len).unwrap();
            assert!(
                got == want[at..at + len],
                "seed {seed}: {len} bytes at {at}"
            );
            let from = r.read_at_uncached_into(at as u64, len, &mut buf).unwrap();
            assert!(
                buf[from..from + len] == want[at..at + len],
                "seed {seed}: {len} bytes at {at} into a reused buffer"
            );
        }
        let end = want.len() as u64;
        assert!(r.read_at_uncached(end - 10, 11).is_err(), "seed {seed}");
        assert!(r.read_at_uncached(end, 0).unwrap().is_empty());
    }
}
