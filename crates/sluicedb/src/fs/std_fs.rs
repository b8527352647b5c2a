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
    fn flush(&mut self) -> Result<()> {
        self.flush_buf()
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
}

impl RandomAccessFile for StdReadable {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|e| Error::io("read", &self.path, e))?;
        Ok(buf)
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
    /// The length now (one `fstat`), as `MemFs` reports it: a value store
    /// head grows while its reader is cached. Should `fstat` fail, the
    /// length at open.
    fn len(&self) -> u64 {
        self.file.metadata().map_or(self.len, |m| m.len())
    }
}

struct StdLock {
    _file: File,
}
impl FileLock for StdLock {}

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
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }
    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io("remove", path, e))
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
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("sync_dir", dir, e))
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("lock", path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(StdLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => {
                Err(Error::Locked(path.parent().unwrap_or(path).to_path_buf()))
            }
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
        }
    }
    fn allocated_len(&self, path: &Path) -> Result<u64> {
        let m = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
        Ok(m.blocks() * 512)
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
        use rustix::fs::{fallocate, FallocateFlags};
        use rustix::io::Errno;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
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
}
