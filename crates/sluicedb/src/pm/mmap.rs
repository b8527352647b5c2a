//! [`MmapPm`]: persistent memory emulated on a preallocated file mapped
//! into memory.
//!
//! Under [`FenceMode::Msync`] the region's bytes are kept twice: in an
//! image in anonymous memory, which every read sees and every store
//! changes first, and in the file, the durable copy. Stores of byte ranges
//! are written into the file (`pwrite`) as the whole pages they touch,
//! copied from the image; aligned 8-byte stores go to the image and to
//! the mapping of the file (atomic, so readers never see half a word); a
//! flush records the pages of its range; a fence `msync`s them, in one
//! call over the span they cover. Under [`FenceMode::Cache`] (whose fences
//! write nothing back) there is no image: reads and stores go through the
//! mapping, a copy without a system call, as they would to real PM.
//!
//! Why an image: real PM is read from and stored to in place, and is
//! never taken away. The file's pages are page cache, which the kernel
//! reclaims under memory pressure like any other: under a memory cgroup
//! of a quarter of the data, reads of the buffer (a flush job's reading
//! of its leaves' records) faulted evicted pages back in from the disk,
//! and a store of a record into a page that was not cached read the page
//! first, on the writer's path; a fifth of the lightkv preset's CPU under
//! updates (`docs/experiments.md`, "LightKV: updates under a memory cap").
//! Anonymous memory is not reclaimed (without swap), and a store of whole
//! pages never reads what it replaces. The image costs the region's size
//! in memory, which the page cache gave the region anyway while it was
//! not under pressure (the buffer must fit in the memory the process may
//! use: `lightkv::memory`); `mlock` of the mapping would keep its pages
//! without a second copy, but needs a limit on locked memory (often
//! 8 MiB) that the process may not raise.
//!
//! Why whole pages, and under one lock: a `pwrite` that covers part of a
//! page the page cache does not hold reads it first. Writing the page's
//! bytes around the range too writes what the file already holds (the
//! image and the file agree outside a store), and the store lock keeps a
//! word stored meanwhile on the same page (the header's words share its
//! first page with segment 0) from being overwritten with its older value.
//!
//! Why not store records through the mapping: to write a page back
//! that a process wrote through its mapping, the kernel first
//! write-protects the page in every mapping (so that the next store is
//! seen), which costs a TLB shootdown, an interrupt of every other core
//! running this process, per page; and the next store to the page takes a
//! fault to make it writable again. With records stored through the
//! mapping, these were a quarter of the lightkv preset's CPU time under
//! updates (`docs/experiments.md`, "LightKV: stores by pwrite"). A page
//! only ever written by `pwrite` is mapped read-only, and its write-back
//! interrupts no one. Only the header's words (segment ends, watermark,
//! marks) are stored through the mapping: a few pages per fence.
//!
//! An `msync` costs
//! about an fsync here, so fences are group-committed like journal syncs:
//! one `msync` at a time, and a fence whose flushes an `msync` that began
//! after them already covered returns without its own.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{Advice, MmapOptions, MmapRaw};
use parking_lot::Mutex;

use super::{check_range, check_size, check_word, Pm};
use crate::error::{Error, Result};

/// The granule `msync` works in.
const PAGE_BYTES: u64 = 4096;

/// What a fence of an [`MmapPm`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FenceMode {
    /// `msync` the flushed pages: durable across a power loss, at the cost
    /// of a device flush per (group-committed) fence.
    #[default]
    Msync,
    /// A memory fence only: the pages stay in the page cache, so data
    /// survives a process crash but not a power loss. Stands in for real
    /// PM, whose fence costs about a hundred nanoseconds.
    Cache,
}

/// Pages flushed and not yet fenced.
#[derive(Default)]
struct Pending {
    /// Page-aligned byte ranges, in flush order (merged when adjacent).
    ranges: Vec<(u64, u64)>,
    /// Flushes so far: a fence must cover this many.
    flushes: u64,
}

/// Fence state; its lock is held for the whole `msync`, so that one runs at
/// a time and the fences behind it see what it covered.
#[derive(Default)]
struct Durable {
    /// Every flush up to this count is durable.
    flushes: u64,
    /// The first failed `msync`: the region stays failed.
    failed: Option<String>,
}

/// Persistent memory on a mapped file. See the module documentation.
pub struct MmapPm {
    path: PathBuf,
    /// The file, for stores of byte ranges ([`Pm::write`]).
    file: File,
    map: MmapRaw,
    /// The region's bytes in anonymous memory, under [`FenceMode::Msync`]
    /// (module documentation): what reads see.
    image: Option<MmapRaw>,
    /// Held by every store under [`FenceMode::Msync`], from its store into
    /// the image to its store into the file, so that the file's pages are
    /// written in the order the image's were.
    stores: Mutex<()>,
    mode: FenceMode,
    pending: Mutex<Pending>,
    durable: Mutex<Durable>,
}

impl std::fmt::Debug for MmapPm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmapPm")
            .field("path", &self.path)
            .field("len", &self.map.len())
            .field("mode", &self.mode)
            .finish()
    }
}

impl MmapPm {
    /// Opens the region in `path`, creating it (`len_bytes` zeroes, space
    /// allocated, file and directory entry synced) if it is missing or
    /// empty. An existing region of another size is an error.
    pub fn open(path: &Path, len_bytes: u64, mode: FenceMode) -> Result<MmapPm> {
        check_size(path, len_bytes)?;
        let io = |op| move |e| Error::io(op, path, e);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io("open"))?;
        let found = file.metadata().map_err(io("metadata"))?.len();
        if found == 0 {
            preallocate(&file, path, len_bytes)?;
        } else if found != len_bytes {
            return Err(Error::InvalidArgument(format!(
                "{}: persistent memory region of {found} bytes, {len_bytes} expected",
                path.display()
            )));
        }
        let map = MmapOptions::new().map_raw(&file).map_err(io("mmap"))?;
        advise_small_pages(&map);
        let image = match mode {
            FenceMode::Msync => Some(load_image(&file, path, len_bytes, found == 0)?),
            FenceMode::Cache => None,
        };
        Ok(MmapPm {
            path: path.to_path_buf(),
            file,
            map,
            image,
            stores: Mutex::new(()),
            mode,
            pending: Mutex::new(Pending::default()),
            durable: Mutex::new(Durable::default()),
        })
    }

    fn word(&self, offset: u64) -> &AtomicU64 {
        word_of(&self.map, offset)
    }

    /// Where reads come from: the image, or the mapping without one.
    fn readable(&self) -> &MmapRaw {
        self.image.as_ref().unwrap_or(&self.map)
    }
}

/// The 8-byte word at `offset` of `map` as an atomic.
fn word_of(map: &MmapRaw, offset: u64) -> &AtomicU64 {
    // SAFETY: callers checked that `offset` is 8-aligned and inside the
    // region, and `map` (the file's mapping or the image) is as long as the
    // region with a page-aligned base, so the address is a valid, aligned
    // u64 for as long as `map` lives; all 8-byte accesses of a word go
    // through this atomic.
    unsafe { &*(map.as_mut_ptr().add(offset as usize) as *const AtomicU64) }
}

/// The image of a region of `len` bytes in anonymous memory, holding what
/// the file holds (a region just created is zeroes, as the anonymous
/// memory is).
fn load_image(file: &File, path: &Path, len: u64, created: bool) -> Result<MmapRaw> {
    let io = |op| move |e| Error::io(op, path, e);
    let image = MmapOptions::new()
        .len(len as usize)
        .map_anon()
        .map_err(io("mmap"))?;
    let image = MmapRaw::from(image);
    if !created {
        // SAFETY: the image is `len` bytes, just mapped, and no one else
        // has it yet.
        let bytes = unsafe { std::slice::from_raw_parts_mut(image.as_mut_ptr(), len as usize) };
        file.read_exact_at(bytes, 0).map_err(io("read"))?;
    }
    Ok(image)
}

/// Asks the kernel to back the mapping with single pages. A store marks
/// its whole page-cache folio dirty, and an `msync` writes dirty folios
/// back whole: with the large folios (up to 2 MiB) that Linux's page cache
/// gives a file faulted in in order, a 1 KiB record cost an `msync` up to
/// 2 MiB of writes, and the buffer's fences wrote 12-20 times the data
/// (`docs/experiments.md`, "LightKV: the write buffer's pages"). Random
/// access turns off the fault path's readahead, which is what grows the
/// folios; no huge pages keeps them from being mapped by 2 MiB. Both are
/// hints: a kernel that ignores them only costs speed.
fn advise_small_pages(map: &MmapRaw) {
    let _ = map.advise(Advice::Random);
    #[cfg(target_os = "linux")]
    let _ = map.advise(Advice::NoHugePage);
}

/// Sizes a new file to `len` with its blocks allocated (so that a store to
/// the mapping cannot fail for space later), then syncs it and its name.
fn preallocate(file: &File, path: &Path, len: u64) -> Result<()> {
    file.set_len(len)
        .map_err(|e| Error::io("set_len", path, e))?;
    #[cfg(target_os = "linux")]
    rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len)
        .map_err(|e| Error::io("fallocate", path, e.into()))?;
    file.sync_all().map_err(|e| Error::io("sync", path, e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("sync_dir", dir, e))?;
    }
    Ok(())
}

impl Pm for MmapPm {
    fn name(&self) -> &Path {
        &self.path
    }

    fn len(&self) -> u64 {
        self.map.len() as u64
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(&self.path, self.len(), offset, buf.len() as u64)?;
        // SAFETY: the range is inside the region (checked); the trait's
        // contract keeps other threads from writing these bytes meanwhile.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.readable().as_ptr().add(offset as usize),
                buf.as_mut_ptr(),
                buf.len(),
            );
        }
        Ok(())
    }

    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        check_range(&self.path, self.len(), offset, len as u64)?;
        // SAFETY: the range is inside the region (checked), whose memory
        // lives as long as `self`; the trait's contract keeps other threads
        // from writing these bytes while they are read, so the slice does
        // not change while `f` holds it.
        let bytes = unsafe {
            std::slice::from_raw_parts(self.readable().as_ptr().add(offset as usize), len)
        };
        f(bytes);
        Ok(())
    }

    fn read_u64(&self, offset: u64) -> Result<u64> {
        check_word(&self.path, self.len(), offset)?;
        Ok(u64::from_le(
            word_of(self.readable(), offset).load(Ordering::Acquire),
        ))
    }

    /// Into the image, then its whole pages into the file, not through
    /// the mapping (module documentation): reads see the bytes at once.
    /// Under [`FenceMode::Cache`] no fence writes pages back, so nothing
    /// write-protects them: stores go through the mapping, a copy without
    /// a system call, as they would to real PM.
    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range(&self.path, self.len(), offset, data.len() as u64)?;
        let Some(image) = &self.image else {
            // SAFETY: the range is inside the mapping (checked); the trait's
            // contract keeps other threads from reading or writing these
            // bytes meanwhile.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    self.map.as_mut_ptr().add(offset as usize),
                    data.len(),
                );
            }
            return Ok(());
        };
        if data.is_empty() {
            return Ok(());
        }
        let start = offset / PAGE_BYTES * PAGE_BYTES;
        let end = (offset + data.len() as u64)
            .div_ceil(PAGE_BYTES)
            .saturating_mul(PAGE_BYTES)
            .min(self.len());
        let _stores = self.stores.lock();
        // SAFETY: both ranges are inside the image (checked, and `end` is
        // clipped to the region); the trait's contract keeps other threads
        // from reading or writing `offset..offset + len` meanwhile, and the
        // store lock keeps every other store out of the image while its
        // pages are copied to the file.
        let pages = unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                image.as_mut_ptr().add(offset as usize),
                data.len(),
            );
            std::slice::from_raw_parts(image.as_ptr().add(start as usize), (end - start) as usize)
        };
        self.file
            .write_all_at(pages, start)
            .map_err(|e| Error::io("pwrite", &self.path, e))
    }

    /// The image under [`FenceMode::Msync`]: the region's size.
    fn memory_bytes(&self) -> u64 {
        self.image.as_ref().map_or(0, |_| self.len())
    }

    fn write_u64(&self, offset: u64, value: u64) -> Result<()> {
        check_word(&self.path, self.len(), offset)?;
        let _stores = self.image.as_ref().map(|image| {
            let stores = self.stores.lock();
            word_of(image, offset).store(value.to_le(), Ordering::Release);
            stores
        });
        self.word(offset).store(value.to_le(), Ordering::Release);
        Ok(())
    }

    fn flush(&self, offset: u64, len: u64) {
        // A fence of `FenceMode::Cache` syncs nothing, so there is nothing
        // to note: noted ranges would pile up, never taken by an `msync`.
        if len == 0 || self.mode == FenceMode::Cache {
            return;
        }
        let start = offset / PAGE_BYTES * PAGE_BYTES;
        let end = (offset.saturating_add(len).div_ceil(PAGE_BYTES) * PAGE_BYTES).min(self.len());
        let mut p = self.pending.lock();
        p.flushes += 1;
        match p.ranges.last_mut() {
            Some(last) if last.0 <= end && start <= last.1 => {
                *last = (last.0.min(start), last.1.max(end));
            }
            _ => p.ranges.push((start, end)),
        }
    }

    fn fence(&self) -> Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.mode == FenceMode::Cache {
            return Ok(());
        }
        let target = self.pending.lock().flushes;
        let mut durable = self.durable.lock();
        if let Some(failed) = &durable.failed {
            return Err(failed_error(&self.path, failed));
        }
        if durable.flushes >= target {
            // An msync that began after our flushes covered them.
            return Ok(());
        }
        let (ranges, covered) = {
            let mut p = self.pending.lock();
            (std::mem::take(&mut p.ranges), p.flushes)
        };
        // One msync over the span of every flushed range: each msync is a
        // device flush of its own, and writing back a dirty page that was
        // not flushed is allowed (a cache may write any line back).
        let start = ranges.iter().map(|r| r.0).min();
        let end = ranges.iter().map(|r| r.1).max();
        if let (Some(start), Some(end)) = (start, end) {
            if let Err(e) = self.map.flush_range(start as usize, (end - start) as usize) {
                let msg = e.to_string();
                durable.failed = Some(msg.clone());
                return Err(failed_error(&self.path, &msg));
            }
        }
        durable.flushes = covered;
        Ok(())
    }
}

fn failed_error(path: &Path, msg: &str) -> Error {
    Error::io(
        "msync",
        path,
        std::io::Error::other(format!("an earlier msync failed: {msg}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_survive_a_reopen_and_the_size_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pm");
        for mode in [FenceMode::Msync, FenceMode::Cache] {
            let _ = std::fs::remove_file(&path);
            let pm = MmapPm::open(&path, 3 * PAGE_BYTES, mode).unwrap();
            pm.write(4090, b"across a page").unwrap();
            pm.write_u64(8192, 42).unwrap();
            pm.persist(4090, 13).unwrap();
            pm.persist(8192, 8).unwrap();
            drop(pm);
            let pm = MmapPm::open(&path, 3 * PAGE_BYTES, mode).unwrap();
            let mut buf = [0; 13];
            pm.read(4090, &mut buf).unwrap();
            assert_eq!(&buf, b"across a page");
            let mut seen = Vec::new();
            pm.read_with(4090, 13, &mut |b| seen.extend_from_slice(b))
                .unwrap();
            assert_eq!(seen, b"across a page");
            assert!(pm.read_with(3 * PAGE_BYTES - 4, 5, &mut |_| ()).is_err());
            assert_eq!(pm.read_u64(8192).unwrap(), 42);
            assert!(MmapPm::open(&path, PAGE_BYTES, mode).is_err());
        }
    }

    /// A store writes the whole pages it touches into the file from the
    /// image: what the file held around it, bytes and words, stays, and
    /// words stored on the same page while ranges are stored there (as the
    /// header's words share the first page with segment 0) are not
    /// overwritten with their older values. Seeded; the seed is printed.
    #[test]
    fn whole_page_stores_keep_their_neighbours_in_the_file() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        eprintln!("seed {seed}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pm");
        let len = 4 * PAGE_BYTES;
        let pm = MmapPm::open(&path, len, FenceMode::Msync).unwrap();
        let mut model = vec![0u8; len as usize];
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for _ in 0..300 {
            let at = rng.gen_range(0..len - 8);
            if rng.gen_bool(0.3) {
                let at = at / 8 * 8;
                let v: u64 = rng.gen();
                pm.write_u64(at, v).unwrap();
                model[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
            } else {
                let n = rng.gen_range(1..=(len - at).min(5000));
                let data: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                pm.write(at, &data).unwrap();
                model[at as usize..(at + n) as usize].copy_from_slice(&data);
            }
        }
        pm.persist(0, len).unwrap();
        assert!(
            std::fs::read(&path).unwrap() == model,
            "seed {seed}: the file"
        );
        // Words on one page stored from other threads while ranges go to
        // the rest of it: every word's last value is in the file.
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let pm = &pm;
                s.spawn(move || {
                    for i in 0..2000u64 {
                        pm.write_u64(PAGE_BYTES + 8 * t, i).unwrap();
                    }
                });
            }
            for i in 0..2000u64 {
                let at = PAGE_BYTES + 64 + (i % 50) * 8;
                pm.write(at, &i.to_le_bytes()[..7]).unwrap();
            }
        });
        drop(pm);
        let pm = MmapPm::open(&path, len, FenceMode::Msync).unwrap();
        for t in 0..3u64 {
            assert_eq!(
                pm.read_u64(PAGE_BYTES + 8 * t).unwrap(),
                1999,
                "seed {seed}"
            );
        }
        let file = std::fs::read(&path).unwrap();
        assert_eq!(&file[..PAGE_BYTES as usize], &model[..PAGE_BYTES as usize]);
        assert_eq!(
            &file[2 * PAGE_BYTES as usize..],
            &model[2 * PAGE_BYTES as usize..]
        );
    }

    #[test]
    fn concurrent_fences_cover_every_flush() {
        let dir = tempfile::tempdir().unwrap();
        let pm = MmapPm::open(&dir.path().join("pm"), 8 * PAGE_BYTES, FenceMode::Msync).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let pm = &pm;
                s.spawn(move || {
                    for i in 0..8 {
                        let at = (t * 2 + i % 2) * PAGE_BYTES + i * 8;
                        pm.write_u64(at, i).unwrap();
                        pm.persist(at, 8).unwrap();
                    }
                });
            }
        });
        assert!(pm.pending.lock().ranges.is_empty());
        assert_eq!(pm.durable.lock().flushes, 32);
    }
}
