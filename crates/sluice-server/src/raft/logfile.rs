//! The Raft log in files of its own (`docs/format/raft-log.md`): segment
//! files allocated whole when created, written in place and synced with
//! `fdatasync`. A sync of bytes written into allocated blocks commits no
//! file-system metadata (the length does not change), so it costs a
//! fraction of an appending journal's (0.2-0.6 ms against 1.6-5.5 ms on
//! this machine's disk); the leader and each follower pay one per append.
//!
//! ```text
//! segment  <first index, 20 digits>.seg, SEGMENT_BYTES long (or one record's size)
//!   header  "SLRLOG02" | first u64 LE | salt u64 LE | crc32c(previous 24 bytes) u32 LE | 0u32
//!   record  len u32 LE | crc u32 LE | payload (len bytes)
//!           crc = crc32c chained from the previous record's crc (the first
//!           record's from the header's), over index u64 LE then payload
//!   end     the first record whose length is zero, runs past the file, or
//!           whose crc does not match
//! purged    crc32c u32 LE | the last purged entry's log id (postcard)
//! ```
//!
//! The chained checksum makes a record valid only after the records it
//! followed when it was written: bytes left behind by a truncation, or a
//! torn write, end the log there. A segment that is not the last must end
//! where the next one begins; a gap is damage (an error naming the file
//! and offset). The last segment's log ends at its first invalid record:
//! only bytes written after the last sync can be torn.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A segment's length: a new segment is allocated this long (longer for
/// a record that does not fit).
pub const SEGMENT_BYTES: u64 = 64 << 20;
const MAGIC: &[u8; 8] = b"SLRLOG02";
/// The magic of segments whose entries held their requests decoded
/// (before [`super::batch`]); such a log is refused, not misread.
const OLD_MAGIC: &[u8; 8] = b"SLRLOG01";
const HEADER_BYTES: u64 = 32;
const RECORD_HEADER: u64 = 8;
const PURGED: &str = "purged";
const PURGED_TMP: &str = "purged.tmp";
/// The next segment, zero-filled ahead of need (or a purged one reused),
/// is `spare-<n>.tmp`: a name per file, so that a thread still filling
/// one of a log opened before never writes into this one's.
const SPARE_PREFIX: &str = "spare-";

/// The next segment's file: being zero-filled, or ready.
enum Spare {
    Making(PathBuf, std::thread::JoinHandle<Result<File, String>>),
    Ready(PathBuf, File),
}

/// Writes `len` zero bytes to a new file at `path` and syncs it: blocks
/// written once are overwritten in place with no metadata to commit (a
/// write into `fallocate`d but unwritten blocks converts them, and its
/// `fdatasync` commits the file system's journal: 4 ms here at times).
fn make_spare(path: &Path, len: u64) -> Result<File, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| err(path, e))?;
    if !zero_fill_direct(path, len)? {
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64) as usize;
            f.write_all_at(&zeros[..n], at).map_err(|e| err(path, e))?;
            at += n as u64;
        }
    }
    f.sync_all().map_err(|e| err(path, e))?;
    Ok(f)
}

/// Zeroes the file at `path` through `O_DIRECT`: the device writes the
/// blocks, and this process does not copy 64 MiB into the page cache per
/// segment (under pipelined writes that copy was a tenth of each node's
/// CPU). Returns false, having written nothing, where `O_DIRECT` is not
/// supported (tmpfs) or `len` is not a whole number of blocks.
fn zero_fill_direct(path: &Path, len: u64) -> Result<bool, String> {
    use std::os::unix::fs::OpenOptionsExt;
    const ALIGN: usize = 4096;
    const PIECE: usize = 1 << 20;
    if !len.is_multiple_of(ALIGN as u64) {
        return Ok(false);
    }
    let Ok(d) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(path)
    else {
        return Ok(false);
    };
    let raw = vec![0u8; PIECE + ALIGN];
    let skip = raw.as_ptr().align_offset(ALIGN);
    let zeros = &raw[skip..skip + PIECE];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(PIECE as u64) as usize;
        match d.write_all_at(&zeros[..n], at) {
            Ok(()) => at += n as u64,
            Err(e)
                if at == 0 && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) =>
            {
                return Ok(false)
            }
            Err(e) => return Err(err(path, e)),
        }
    }
    Ok(true)
}

fn err(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

fn corrupt(path: &Path, offset: u64, why: &str) -> String {
    format!(
        "Corruption: raft log {}: {why} at offset {offset}",
        path.display()
    )
}

fn segment_name(first: u64) -> String {
    format!("{first:020}.seg")
}

/// A record's checksum: chained from `prev`, over its index and payload.
fn record_crc(prev: u32, index: u64, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(prev, &index.to_le_bytes()), payload)
}

fn header(first: u64, salt: u64) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&first.to_le_bytes());
    h[16..24].copy_from_slice(&salt.to_le_bytes());
    let crc = crc32c::crc32c(&h[..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The header's checksum (the chain's seed), if the header is whole and
/// names `first`.
fn check_header(h: &[u8], first: u64) -> Option<u32> {
    if h.len() < HEADER_BYTES as usize || &h[..8] != MAGIC {
        return None;
    }
    let crc = crc32c::crc32c(&h[..24]);
    let named = u64::from_le_bytes(h[8..16].try_into().ok()?);
    (u32::from_le_bytes(h[24..28].try_into().ok()?) == crc && named == first).then_some(crc)
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| err(dir, e))
}

/// One segment file.
pub struct Segment {
    first: u64,
    path: PathBuf,
    file: File,
    len: u64,
}

/// Where an entry's record is.
#[derive(Clone)]
struct Slot {
    seg: Arc<Segment>,
    offset: u64,
    len: u32,
    /// The record's checksum and the one it chains from.
    crc: u32,
    prev: u32,
}

/// A record to read outside the log's lock.
pub struct Pending {
    index: u64,
    slot: Slot,
}

impl Pending {
    /// Reads the record and checks it; `f` gets its payload.
    pub fn read<T>(&self, f: impl FnOnce(&[u8]) -> T) -> Result<T, String> {
        thread_local! {
            // Records are read into one buffer per thread, kept: an
            // entry is up to a MiB, and a fresh buffer each is page faults.
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            self.read_into(&mut buf)?;
            Ok(f(&buf[RECORD_HEADER as usize..]))
        })
    }

    fn read_into(&self, buf: &mut Vec<u8>) -> Result<(), String> {
        let s = &self.slot;
        buf.resize(RECORD_HEADER as usize + s.len as usize, 0);
        s.seg
            .file
            .read_exact_at(buf, s.offset)
            .map_err(|e| err(&s.seg.path, e))?;
        let payload = &buf[RECORD_HEADER as usize..];
        let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        if crc != s.crc || record_crc(s.prev, self.index, payload) != crc {
            return Err(corrupt(
                &s.seg.path,
                s.offset,
                &format!("entry {} changed on disk (checksum mismatch)", self.index),
            ));
        }
        Ok(())
    }
}

/// Files to make durable after an append, outside the log's lock.
#[must_use]
pub struct Syncs(Vec<Arc<Segment>>);

impl Syncs {
    pub fn run(self) -> Result<(), String> {
        for s in self.0 {
            s.file.sync_data().map_err(|e| err(&s.path, e))?;
        }
        Ok(())
    }

    /// Adds `other`'s files (once each): one sync then covers the
    /// appends of both (`raft::logsync` groups appends this way).
    pub fn absorb(&mut self, other: Syncs) {
        for s in other.0 {
            if !self.0.iter().any(|t| Arc::ptr_eq(t, &s)) {
                self.0.push(s);
            }
        }
    }

    /// No file to sync.
    pub fn none() -> Syncs {
        Syncs(Vec::new())
    }
}

/// The log: its segments and, in memory, where each entry after the purge
/// point is.
pub struct LogFile {
    dir: PathBuf,
    segs: VecDeque<Arc<Segment>>,
    /// `slots[i]` holds entry `first + i`.
    slots: VecDeque<Slot>,
    first: u64,
    /// Where the next record goes in the last segment, the index it must
    /// have there, and the checksum it chains from.
    tail: u64,
    tail_index: u64,
    tail_crc: u32,
    /// A new segment's length.
    seg_bytes: u64,
    salt: u64,
    spare: Option<Spare>,
    /// Where appends gather their records before one write (reused).
    wbuf: Vec<u8>,
}

impl LogFile {
    /// Opens (creating) the log in `dir`. `purged_index` reads the purge
    /// marker's bytes (the caller's log id) into the purged entry's index.
    /// Returns the log and the marker's bytes. Entries after the marker
    /// are kept in memory's index; segments wholly before it are removed.
    ///
    /// `synced` is an index the log is known to have synced (the committed
    /// id the node's database holds): the last segment's records ending
    /// before it are damage, a `Corruption` error naming the file and the
    /// offset, not a crash's torn tail.
    pub fn open(
        dir: &Path,
        synced: Option<u64>,
        purged_index: impl FnOnce(&[u8]) -> Result<u64, String>,
    ) -> Result<(LogFile, Option<Vec<u8>>), String> {
        LogFile::open_sized(dir, SEGMENT_BYTES, synced, purged_index)
    }

    /// [`LogFile::open`] with segments of `seg_bytes` (tests).
    pub fn open_sized(
        dir: &Path,
        seg_bytes: u64,
        synced: Option<u64>,
        purged_index: impl FnOnce(&[u8]) -> Result<u64, String>,
    ) -> Result<(LogFile, Option<Vec<u8>>), String> {
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
        let _ = std::fs::remove_file(dir.join(PURGED_TMP));
        let marker_path = dir.join(PURGED);
        let marker = match std::fs::read(&marker_path) {
            Ok(raw) => {
                if raw.len() < 4 || crc32c::crc32c(&raw[4..]).to_le_bytes() != raw[..4] {
                    return Err(corrupt(&marker_path, 0, "checksum mismatch"));
                }
                Some(raw[4..].to_vec())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(err(&marker_path, e)),
        };
        let keep_from = match &marker {
            Some(m) => purged_index(m)
                .map_err(|e| corrupt(&marker_path, 4, &e))?
                .saturating_add(1),
            None => 0,
        };
        let mut firsts = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| err(dir, e))? {
            let name = e.map_err(|e| err(dir, e))?.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(SPARE_PREFIX) {
                let _ = std::fs::remove_file(dir.join(&*name));
            }
            if let Some(n) = name.strip_suffix(".seg") {
                if let Ok(first) = n.parse::<u64>() {
                    firsts.push(first);
                }
            }
        }
        firsts.sort_unstable();
        // Segments wholly purged (the next begins at or before the first
        // entry kept) go unread: a crash may have removed some of them.
        let mut removed = false;
        while firsts.len() > 1 && firsts[1] <= keep_from {
            let path = dir.join(segment_name(firsts[0]));
            std::fs::remove_file(&path).map_err(|e| err(&path, e))?;
            firsts.remove(0);
            removed = true;
        }
        if removed {
            sync_dir(dir)?;
        }
        let log = LogFile {
            dir: dir.to_path_buf(),
            segs: VecDeque::new(),
            slots: VecDeque::new(),
            first: keep_from,
            tail: 0,
            tail_index: u64::MAX,
            tail_crc: 0,
            seg_bytes,
            salt: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            spare: None,
            wbuf: Vec::new(),
        };
        // Only entries after the purge point must be held.
        let synced = synced.filter(|&s| s >= keep_from);
        let log = log.recover(&firsts, keep_from, synced)?;
        if let Some(s) = synced {
            if log.bounds().1 <= s && firsts.is_empty() {
                return Err(corrupt(
                    dir,
                    0,
                    &format!("no segment, but entry {s} was synced (committed)"),
                ));
            }
        }
        Ok((log, marker))
    }

    /// Scans the segments named by `firsts` (sorted), indexing the entries
    /// from `keep_from` on; `synced` as in [`LogFile::open`].
    fn recover(
        mut self,
        firsts: &[u64],
        keep_from: u64,
        synced: Option<u64>,
    ) -> Result<LogFile, String> {
        let mut expect: Option<u64> = None;
        for (i, &first) in firsts.iter().enumerate() {
            let path = self.dir.join(segment_name(first));
            let last_seg = i + 1 == firsts.len();
            let gap = match expect {
                Some(e) => e != first,
                None => keep_from > 0 && first > keep_from,
            };
            if gap {
                let (at, off) = match self.segs.back() {
                    Some(s) => (s.path.clone(), self.tail),
                    None => (path.clone(), 0),
                };
                return Err(corrupt(
                    &at,
                    off,
                    &format!(
                        "entries from {} are missing; the next segment begins at {first}",
                        expect.unwrap_or(keep_from)
                    ),
                ));
            }
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| err(&path, e))?;
            let len = file.metadata().map_err(|e| err(&path, e))?.len();
            let mut h = [0u8; HEADER_BYTES as usize];
            let seed = match file.read_exact_at(&mut h, 0) {
                Ok(()) if &h[..8] == OLD_MAGIC => {
                    return Err(format!(
                        "{}: a Raft log segment of an older format (SLRLOG01); \
                         start this node afresh under a new id",
                        path.display()
                    ))
                }
                Ok(()) => check_header(&h, first),
                Err(_) => None,
            };
            let Some(seed) = seed else {
                if last_seg && synced.is_none_or(|s| s < first) {
                    // A segment whose creation a crash cut: nothing was
                    // written to it (a segment is begun synced before any
                    // record goes in).
                    std::fs::remove_file(&path).map_err(|e| err(&path, e))?;
                    sync_dir(&self.dir)?;
                    break;
                }
                return Err(corrupt(&path, 0, "bad segment header"));
            };
            let seg = Arc::new(Segment {
                first,
                path,
                file,
                len,
            });
            let (mut off, mut index, mut crc) = (HEADER_BYTES, first, seed);
            let mut rh = [0u8; RECORD_HEADER as usize];
            let mut buf = Vec::new();
            while off + RECORD_HEADER <= len {
                if seg.file.read_exact_at(&mut rh, off).is_err() {
                    break;
                }
                let n = u32::from_le_bytes([rh[0], rh[1], rh[2], rh[3]]);
                let want = u32::from_le_bytes([rh[4], rh[5], rh[6], rh[7]]);
                if n == 0 || off + RECORD_HEADER + u64::from(n) > len {
                    break;
                }
                buf.resize(n as usize, 0);
                if seg
                    .file
                    .read_exact_at(&mut buf, off + RECORD_HEADER)
                    .is_err()
                {
                    break;
                }
                let c = record_crc(crc, index, &buf);
                if c != want {
                    break;
                }
                if index >= keep_from {
                    if self.slots.is_empty() {
                        self.first = index;
                    }
                    self.slots.push_back(Slot {
                        seg: seg.clone(),
                        offset: off,
                        len: n,
                        crc: c,
                        prev: crc,
                    });
                }
                crc = c;
                off += RECORD_HEADER + u64::from(n);
                index += 1;
            }
            if last_seg {
                if let Some(s) = synced.filter(|&s| s >= index) {
                    // Records end here, but entry `s` was synced: no
                    // crash tears a synced record, so this is damage.
                    return Err(corrupt(
                        &seg.path,
                        off,
                        &format!(
                            "entry {index} does not check, but entries through {s} were synced \
                             (committed): damage, not a torn tail"
                        ),
                    ));
                }
            }
            self.segs.push_back(seg);
            self.tail = off;
            self.tail_index = index;
            self.tail_crc = crc;
            expect = Some(index);
        }
        if self.slots.is_empty() {
            // Nothing kept: the next entry begins a segment of its own
            // unless it continues the last one.
            self.first = keep_from.max(expect.unwrap_or(0));
        }
        Ok(self)
    }

    /// Every segment's file, to make all the log holds durable (at open:
    /// records a killed process wrote but did not sync are in the page
    /// cache, readable, and not yet on the disk).
    pub fn sync_all(&self) -> Syncs {
        Syncs(self.segs.iter().cloned().collect())
    }

    /// The index of the first entry held, and of the one after the last
    /// (equal: none held).
    pub fn bounds(&self) -> (u64, u64) {
        (self.first, self.first + self.slots.len() as u64)
    }

    /// Bytes on disk of the records of entries `from..to` held (headers
    /// included).
    pub fn record_bytes(&self, from: u64, to: u64) -> u64 {
        let (lo, hi) = self.bounds();
        (from.max(lo)..to.min(hi))
            .map(|i| RECORD_HEADER + u64::from(self.slots[(i - lo) as usize].len))
            .sum()
    }

    /// The entry through which to purge so that the records of the
    /// entries held up to `upto` take at most `keep_bytes`; none when they
    /// already do.
    pub fn purge_keeping(&self, upto: u64, keep_bytes: u64) -> Option<u64> {
        let (lo, hi) = self.bounds();
        let mut kept = 0;
        for i in (lo..hi.min(upto.saturating_add(1))).rev() {
            kept += RECORD_HEADER + u64::from(self.slots[(i - lo) as usize].len);
            if kept > keep_bytes {
                return Some(i);
            }
        }
        None
    }

    /// Where entries `from..to` are; read them with [`Pending::read`]
    /// outside the log's lock. Indexes not held are left out.
    pub fn locate(&self, from: u64, to: u64) -> Vec<Pending> {
        let (lo, hi) = self.bounds();
        (from.max(lo)..to.min(hi))
            .map(|index| Pending {
                index,
                slot: self.slots[(index - lo) as usize].clone(),
            })
            .collect()
    }

    /// Starts a new last segment whose first record is `first`, syncing
    /// the one before (a segment is only begun once every record before
    /// it is durable, so the log never has a gap).
    fn roll(&mut self, first: u64, need: u64) -> Result<(), String> {
        if let Some(s) = self.segs.back() {
            s.file.sync_data().map_err(|e| err(&s.path, e))?;
        }
        let path = self.dir.join(segment_name(first));
        let len = self.seg_bytes.max(HEADER_BYTES + need);
        self.salt = self.salt.wrapping_add(1);
        let h = header(first, self.salt);
        let spare = match self.spare.take() {
            Some(_) if len != self.seg_bytes => None,
            Some(Spare::Ready(p, f)) => Some((p, f)),
            Some(Spare::Making(p, t)) => t.join().ok().and_then(Result::ok).map(|f| (p, f)),
            None => None,
        };
        let file = match spare {
            Some((spare_path, file)) => {
                // Its header first (synced: the length does not change),
                // then its name.
                file.write_all_at(&h, 0)
                    .and_then(|_| file.sync_data())
                    .map_err(|e| err(&path, e))?;
                std::fs::rename(&spare_path, &path).map_err(|e| err(&path, e))?;
                file
            }
            None => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
                    .map_err(|e| err(&path, e))?;
                // Allocated blocks at least: a sparse file's writes would
                // allocate them, each sync committing that.
                if rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, len)
                    .is_err()
                {
                    file.set_len(len).map_err(|e| err(&path, e))?;
                }
                file.write_all_at(&h, 0).map_err(|e| err(&path, e))?;
                file.sync_all().map_err(|e| err(&path, e))?;
                file
            }
        };
        sync_dir(&self.dir)?;
        let seed = check_header(&h, first).unwrap_or_default();
        if self.slots.is_empty() {
            self.first = first;
        }
        self.segs.push_back(Arc::new(Segment {
            first,
            path,
            file,
            len,
        }));
        self.tail = HEADER_BYTES;
        self.tail_index = first;
        self.tail_crc = seed;
        Ok(())
    }

    /// Writes `records` (entry index, payload; consecutive, the first
    /// right after the last held, or anywhere when none is held) and
    /// returns what to sync before they count as durable.
    pub fn append<P: AsRef<[u8]>>(&mut self, records: &[(u64, P)]) -> Result<Syncs, String> {
        let mut touched: Vec<Arc<Segment>> = Vec::new();
        let mut buf = std::mem::take(&mut self.wbuf);
        buf.clear();
        let r = self.append_into(records, &mut buf, &mut touched);
        self.wbuf = buf;
        r?;
        // Half way through a segment, the next one is made ready.
        if self.spare.is_none() && self.tail > self.seg_bytes / 2 {
            let path = self.spare_path();
            let (p, len) = (path.clone(), self.seg_bytes);
            let t = std::thread::Builder::new()
                .name("raft-log-spare".into())
                .spawn(move || make_spare(&p, len))
                .map_err(|e| format!("raft log: starting a thread: {e}"))?;
            self.spare = Some(Spare::Making(path, t));
        }
        Ok(Syncs(touched))
    }

    /// Writes `records` through `buf`, noting the segments written.
    fn append_into<P: AsRef<[u8]>>(
        &mut self,
        records: &[(u64, P)],
        buf: &mut Vec<u8>,
        touched: &mut Vec<Arc<Segment>>,
    ) -> Result<(), String> {
        let mut buf_at = self.tail;
        for (index, payload) in records {
            let (index, payload) = (index, payload.as_ref());
            let hi = self.bounds().1;
            if !self.slots.is_empty() && *index != hi {
                return Err(format!(
                    "raft log {}: entry {index} appended after entry {}",
                    self.dir.display(),
                    hi.wrapping_sub(1)
                ));
            }
            let need = RECORD_HEADER + payload.len() as u64;
            let fits = self
                .segs
                .back()
                .is_some_and(|s| self.tail_index == *index && self.tail + need <= s.len);
            if !fits {
                self.flush_buf(buf, buf_at, touched)?;
                self.roll(*index, need)?;
                buf_at = self.tail;
            }
            let crc = record_crc(self.tail_crc, *index, payload);
            let len = u32::try_from(payload.len())
                .map_err(|_| format!("raft log: entry {index} is over 4 GiB"))?;
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(&crc.to_le_bytes());
            buf.extend_from_slice(payload);
            let seg = self.segs.back().cloned().ok_or("raft log: no segment")?;
            if self.slots.is_empty() {
                self.first = *index;
            }
            self.slots.push_back(Slot {
                seg,
                offset: self.tail,
                len,
                crc,
                prev: self.tail_crc,
            });
            self.tail += need;
            self.tail_index += 1;
            self.tail_crc = crc;
        }
        self.flush_buf(buf, buf_at, touched)?;
        Ok(())
    }

    fn flush_buf(
        &self,
        buf: &mut Vec<u8>,
        at: u64,
        touched: &mut Vec<Arc<Segment>>,
    ) -> Result<(), String> {
        if buf.is_empty() {
            return Ok(());
        }
        let s = self.segs.back().ok_or("raft log: no segment")?;
        s.file.write_all_at(buf, at).map_err(|e| err(&s.path, e))?;
        buf.clear();
        if !touched.iter().any(|t| Arc::ptr_eq(t, s)) {
            touched.push(s.clone());
        }
        Ok(())
    }

    /// Removes entries `since..` (durably: a crash after this returns
    /// never brings them back).
    pub fn truncate(&mut self, since: u64) -> Result<(), String> {
        let (lo, hi) = self.bounds();
        if since >= hi {
            return Ok(());
        }
        let since = since.max(lo);
        // Whole segments after the cut first: a crash between the steps
        // leaves a prefix of the log as it was.
        let mut removed = false;
        while let Some(s) = self.segs.back() {
            if s.first < since {
                break;
            }
            std::fs::remove_file(&s.path).map_err(|e| err(&s.path, e))?;
            self.segs.pop_back();
            removed = true;
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        let keep = (since - lo) as usize;
        let cut = self.slots.get(keep).cloned();
        self.slots.truncate(keep);
        match (cut, self.segs.back()) {
            (Some(c), Some(last)) if Arc::ptr_eq(&c.seg, last) => {
                // Zero the first cut record's header: the log ends there.
                last.file
                    .write_all_at(&[0u8; RECORD_HEADER as usize], c.offset)
                    .and_then(|_| last.file.sync_data())
                    .map_err(|e| err(&last.path, e))?;
                self.tail = c.offset;
                self.tail_index = since;
                self.tail_crc = c.prev;
            }
            // The segment left last ends before the cut (or none is
            // left): the next append begins a new one.
            _ => self.tail_index = u64::MAX,
        }
        if self.slots.is_empty() {
            self.first = since;
        }
        Ok(())
    }

    /// Records `marker` (the purged entry's log id) durably, then forgets
    /// entries `..=upto` and removes the segments holding only those.
    pub fn purge(&mut self, upto: u64, marker: &[u8]) -> Result<(), String> {
        let tmp = self.dir.join(PURGED_TMP);
        let mut raw = crc32c::crc32c(marker).to_le_bytes().to_vec();
        raw.extend_from_slice(marker);
        std::fs::write(&tmp, &raw).map_err(|e| err(&tmp, e))?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| err(&tmp, e))?;
        std::fs::rename(&tmp, self.dir.join(PURGED)).map_err(|e| err(&tmp, e))?;
        sync_dir(&self.dir)?;
        let keep_from = upto.saturating_add(1);
        let (lo, hi) = self.bounds();
        let gone = (keep_from.min(hi)).saturating_sub(lo) as usize;
        self.slots.drain(..gone);
        if self.slots.is_empty() {
            self.first = keep_from.max(hi);
            if hi < keep_from {
                // Purged past the last entry: the next begins a segment.
                self.tail_index = u64::MAX;
            }
        } else {
            self.first = lo + gone as u64;
        }
        // A segment goes once the next one begins at or before the first
        // entry kept.
        let mut removed = false;
        while self.segs.len() > 1 && self.segs[1].first <= keep_from {
            let s = self.segs.pop_front().ok_or("raft log: no segment")?;
            removed = true;
            // The first one goes on as the next segment (its blocks are
            // written) unless one is ready or being made; no one reads it
            // now (readers hold entries after the purge point).
            let s = match Arc::try_unwrap(s) {
                Ok(seg) if self.spare.is_none() && seg.len == self.seg_bytes => {
                    let to = self.spare_path();
                    std::fs::rename(&seg.path, &to).map_err(|e| err(&seg.path, e))?;
                    self.spare = Some(Spare::Ready(to, seg.file));
                    continue;
                }
                Ok(seg) => seg.path,
                Err(shared) => shared.path.clone(),
            };
            std::fs::remove_file(&s).map_err(|e| err(&s, e))?;
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    fn spare_path(&mut self) -> PathBuf {
        self.salt = self.salt.wrapping_add(1);
        self.dir
            .join(format!("{SPARE_PREFIX}{:016x}.tmp", self.salt))
    }

    /// Bytes of the segment files.
    pub fn disk_bytes(&self) -> u64 {
        self.segs.iter().map(|s| s.len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker_index(raw: &[u8]) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            raw.try_into().map_err(|_| "bad marker".to_owned())?,
        ))
    }

    fn open(dir: &Path, seg: u64) -> LogFile {
        LogFile::open_sized(dir, seg, None, marker_index).unwrap().0
    }

    fn payload(index: u64, round: u64) -> Vec<u8> {
        let n = 1 + (index * 7 + round * 13) % 300;
        (0..n).map(|i| (i ^ index ^ round) as u8).collect()
    }

    fn all(log: &LogFile) -> Vec<(u64, Vec<u8>)> {
        let (lo, hi) = log.bounds();
        log.locate(lo, hi)
            .iter()
            .map(|p| (p.index, p.read(|b| b.to_vec()).unwrap()))
            .collect()
    }

    fn append(log: &mut LogFile, from: u64, n: u64, round: u64) {
        let recs: Vec<_> = (from..from + n).map(|i| (i, payload(i, round))).collect();
        log.append(&recs).unwrap().run().unwrap();
    }

    #[test]
    fn entries_survive_a_reopen_across_segments() {
        let t = tempfile::tempdir().unwrap();
        let mut log = open(t.path(), 1024);
        append(&mut log, 1, 40, 0);
        assert!(log.segs.len() > 3, "{} segments", log.segs.len());
        let before = all(&log);
        drop(log);
        let log = open(t.path(), 1024);
        assert_eq!(log.bounds(), (1, 41));
        assert_eq!(all(&log), before);
    }

    #[test]
    fn a_truncation_stays_and_stale_records_never_return() {
        let t = tempfile::tempdir().unwrap();
        let mut log = open(t.path(), 4096);
        append(&mut log, 1, 30, 0);
        log.truncate(20).unwrap();
        drop(log);
        // The records after the cut are still on disk past a zeroed header.
        let mut log = open(t.path(), 4096);
        assert_eq!(log.bounds(), (1, 20));
        // Rewritten shorter under another round: the old records that
        // follow must not chain on.
        append(&mut log, 20, 2, 1);
        drop(log);
        let log = open(t.path(), 4096);
        assert_eq!(log.bounds(), (1, 22));
        assert_eq!(all(&log)[19].1, payload(20, 1));
        assert_eq!(all(&log)[20].1, payload(21, 1));
    }

    /// Writes `bytes` over the file at `path` from `at` (damage).
    fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.write_all_at(bytes, at).unwrap();
    }

    #[test]
    fn a_torn_tail_ends_the_log_at_the_last_whole_record() {
        let t = tempfile::tempdir().unwrap();
        let mut log = open(t.path(), 1 << 20);
        append(&mut log, 1, 10, 0);
        let last = log.slots.back().unwrap().clone();
        let path = last.seg.path.clone();
        drop(last);
        drop(log);
        // Damage the last record's payload: as if its write was cut.
        let at = HEADER_BYTES
            + (1..10)
                .map(|i| RECORD_HEADER + payload(i, 0).len() as u64)
                .sum::<u64>();
        overwrite(&path, at + RECORD_HEADER, b"garbage");
        let mut log = open(t.path(), 1 << 20);
        assert_eq!(log.bounds(), (1, 10));
        append(&mut log, 10, 1, 2);
        assert_eq!(all(&log)[9].1, payload(10, 2));
    }

    /// The same damage to the last segment, once the database says the
    /// entry was synced (committed), is no torn tail: an error naming the
    /// file and the record's offset. A committed id before it, or none,
    /// leaves the torn tail as it was.
    #[test]
    fn damage_to_a_synced_record_of_the_last_segment_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let mut log = open(t.path(), 1 << 20);
        append(&mut log, 1, 10, 0);
        let path = log.segs.back().unwrap().path.clone();
        drop(log);
        let at = HEADER_BYTES
            + (1..7)
                .map(|i| RECORD_HEADER + payload(i, 0).len() as u64)
                .sum::<u64>();
        overwrite(&path, at + RECORD_HEADER + 1, b"x");
        for synced in [7, 10] {
            let e = LogFile::open_sized(t.path(), 1 << 20, Some(synced), marker_index)
                .err()
                .expect("damage to a synced record must be reported");
            assert!(e.starts_with("Corruption"), "{e}");
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(e.contains(&format!("at offset {at}")), "{e}");
        }
        let log = LogFile::open_sized(t.path(), 1 << 20, Some(6), marker_index)
            .unwrap()
            .0;
        assert_eq!(log.bounds(), (1, 7));
        drop(log);
        // Its header too: a synced segment whose header does not check is
        // damage, not a segment a crash cut while it was being made.
        overwrite(&path, 9, b"x");
        let e = LogFile::open_sized(t.path(), 1 << 20, Some(3), marker_index)
            .err()
            .expect("a synced segment's damaged header must be reported");
        assert!(
            e.starts_with("Corruption") && e.contains("at offset 0"),
            "{e}"
        );
        // And a log with no segment at all under a committed id.
        std::fs::remove_file(&path).unwrap();
        let e = LogFile::open_sized(t.path(), 1 << 20, Some(3), marker_index)
            .err()
            .expect("a missing log must be reported");
        assert!(e.starts_with("Corruption"), "{e}");
    }

    #[test]
    fn damage_before_the_last_segment_is_an_error_naming_file_and_offset() {
        let t = tempfile::tempdir().unwrap();
        let mut log = open(t.path(), 1024);
        append(&mut log, 1, 40, 0);
        let first = log.segs[0].path.clone();
        drop(log);
        overwrite(&first, HEADER_BYTES + RECORD_HEADER + 1, &[0xff]);
        let e = LogFile::open_sized(t.path(), 1024, None, marker_index)
            .err()
            .expect("damage must be reported");
        assert!(e.starts_with("Corruption"), "{e}");
        assert!(e.contains(&first.display().to_string()), "{e}");
        assert!(e.contains(&format!("at offset {HEADER_BYTES}")), "{e}");
    }

    #[test]
    fn a_purge_drops_whole_segments_and_is_remembered() {
        let t = tempfile::tempdir().unwrap();
        let mut log = open(t.path(), 1024);
        append(&mut log, 1, 40, 0);
        let n = log.segs.len();
        log.purge(25, &25u64.to_le_bytes()).unwrap();
        assert!(log.segs.len() < n);
        assert_eq!(log.bounds(), (26, 41));
        drop(log);
        let (mut log, marker) = LogFile::open_sized(t.path(), 1024, None, marker_index).unwrap();
        assert_eq!(marker.as_deref(), Some(&25u64.to_le_bytes()[..]));
        assert_eq!(log.bounds(), (26, 41));
        // Past the end: the next entry begins a segment of its own.
        log.purge(50, &50u64.to_le_bytes()).unwrap();
        assert_eq!(log.bounds(), (51, 51));
        append(&mut log, 51, 3, 0);
        drop(log);
        let log = open(t.path(), 1024);
        assert_eq!(log.bounds(), (51, 54));
        assert_eq!(all(&log)[2].1, payload(53, 0));
    }

    /// Random appends, truncations, purges and reopens against a model.
    #[test]
    fn random_operations_match_a_model() {
        let seed = std::env::var("SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        let r = std::panic::catch_unwind(|| random_run(seed));
        if r.is_err() {
            panic!("failed with SEED={seed}");
        }
    }

    fn random_run(seed: u64) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let t = tempfile::tempdir().unwrap();
        let seg = 2048;
        let mut log = open(t.path(), seg);
        // The model: (first index, payloads).
        let mut first = 1u64;
        let mut model: Vec<Vec<u8>> = Vec::new();
        for round in 0..300u64 {
            let hi = first + model.len() as u64;
            match rng.gen_range(0..10) {
                0..=5 => {
                    let n = rng.gen_range(1..6);
                    let recs: Vec<_> = (hi..hi + n).map(|i| (i, payload(i, round))).collect();
                    log.append(&recs).unwrap().run().unwrap();
                    model.extend(recs.into_iter().map(|r| r.1));
                }
                6 if !model.is_empty() => {
                    let at = rng.gen_range(first..hi);
                    log.truncate(at).unwrap();
                    model.truncate((at - first) as usize);
                }
                7 if !model.is_empty() => {
                    let upto = rng.gen_range(first..hi + 3);
                    log.purge(upto, &upto.to_le_bytes()).unwrap();
                    let gone = ((upto + 1).min(hi) - first) as usize;
                    model.drain(..gone);
                    first = upto + 1;
                    if !model.is_empty() {
                        first = hi - model.len() as u64;
                    }
                }
                _ => {
                    drop(log);
                    log = open(t.path(), seg);
                }
            }
            if !model.is_empty() {
                assert_eq!(
                    log.bounds(),
                    (first, first + model.len() as u64),
                    "round {round}"
                );
                let got: Vec<_> = all(&log).into_iter().map(|r| r.1).collect();
                assert_eq!(got, model, "round {round}");
            }
        }
    }
}
