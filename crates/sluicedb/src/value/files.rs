//! Reading records from a value store's files, shared by the layouts: the
//! checks of a read by pointer (WiscKey, FAST '16, §3.3.3), and batched, parallel
//! reads for scans (§3.3.1). A layout says where a pointer's record can be
//! read from ([`RecordFiles::locate`]); the rest is here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::log::reader::{check_record, checked_record, read_record, OwnedRecord};
use super::Read;
use crate::error::{Error, Result};
use crate::fs::{CachedRead, CountedReader, CountingFs, IoClass};
use crate::pointer::ValuePointer;

/// Where a pointed-at record can be read from.
pub(crate) enum Located {
    /// Still in a write buffer (already checked).
    Buffered(OwnedRecord),
    /// In the file, within its valid range of `limit` bytes (the layout's
    /// count: a head file grows while readers hold it open).
    InFile { limit: u64 },
    /// In a file GC collected.
    Collected,
    /// Moved by GC, which left the index alone: the record is at this
    /// pointer now (the table layout's inheritance edges).
    Moved(ValuePointer),
}

/// A layout's files, as the shared read code needs them.
pub(crate) trait RecordFiles: Sync {
    /// Checks `p` against the layout's valid ranges and says where its
    /// record is. (The file's path is built only for an error: scans call
    /// this once per value.)
    fn locate(&self, p: &ValuePointer, key: &[u8]) -> Result<Located>;
    /// True if GC collected `file` (a reader that fails to open such a file
    /// met a deletion, not an I/O error).
    fn is_collected(&self, file: u64) -> bool;
    /// True if GC collected the record at `offset` of `file`: the file, or
    /// the part of it a release punched out. A read that met damage there
    /// met the release, not damage.
    fn is_collected_at(&self, file: u64, offset: u64) -> bool {
        let _ = offset;
        self.is_collected(file)
    }
    /// The file's path.
    fn file_path(&self, file: u64) -> PathBuf;
    /// Open readers and the prefetch threads.
    fn readers(&self) -> &FileReaders;
}

/// Open readers of a store's files, and the threads that read values ahead
/// for scans (started on first use).
pub(crate) struct FileReaders {
    fs: CountingFs,
    open: Mutex<HashMap<u64, CountedReader>>,
    pool: OnceLock<rayon::ThreadPool>,
    threads: usize,
}

impl FileReaders {
    pub(crate) fn new(fs: CountingFs, threads: usize) -> Self {
        FileReaders {
            fs,
            open: Mutex::new(HashMap::new()),
            pool: OnceLock::new(),
            threads: threads.max(1),
        }
    }

    /// The reader of file `number` at `path`, opened once.
    pub(crate) fn get(&self, number: u64, path: &Path) -> Result<CountedReader> {
        self.get_with(number, || path.to_path_buf())
    }

    /// Like [`FileReaders::get`], building the path only to open the file:
    /// reads of a scan ask for open readers once per value.
    pub(crate) fn get_with(
        &self,
        number: u64,
        path: impl FnOnce() -> PathBuf,
    ) -> Result<CountedReader> {
        if let Some(r) = self.open.lock().get(&number) {
            return Ok(r.clone());
        }
        let r = self.fs.open(&path())?;
        self.open.lock().insert(number, r.clone());
        Ok(r)
    }

    /// Forgets the reader of a deleted file.
    pub(crate) fn forget(&self, number: u64) {
        self.open.lock().remove(&number);
    }

    fn pool(&self) -> &rayon::ThreadPool {
        self.pool.get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(self.threads)
                .thread_name(|i| format!("sluice-prefetch-{i}"))
                .build()
                .expect("prefetch threads start")
        })
    }
}

/// The error for a registered reader meeting a collected file.
pub(crate) fn collected_error(path: &Path, p: &ValuePointer) -> Error {
    Error::corruption(
        path,
        p.offset,
        "index entry points into a value store file that GC collected",
    )
}

/// The file's reader; GC may delete the file between `locate` and this
/// open, which is a collected file (`None`), not an I/O error.
fn reader_or_collected<S: RecordFiles + ?Sized>(s: &S, file: u64) -> Result<Option<CountedReader>> {
    match s.readers().get_with(file, || s.file_path(file)) {
        Ok(r) => Ok(Some(r)),
        Err(_) if s.is_collected(file) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads and checks the record `p` points at.
pub(crate) fn read_one<S: RecordFiles + ?Sized>(
    s: &S,
    p: &ValuePointer,
    key: &[u8],
    class: IoClass,
) -> Result<Read> {
    match s.locate(p, key)? {
        Located::Buffered(r) => Ok(Read::Found(r)),
        Located::Collected => Ok(Read::Collected),
        // The new pointer names a live file: one more step at most.
        Located::Moved(q) => read_one(s, &q, key, class),
        Located::InFile { limit } => {
            let Some(reader) = reader_or_collected(s, p.file)? else {
                return Ok(Read::Collected);
            };
            match read_record(&reader, || s.file_path(p.file), p, key, limit, class) {
                Ok(r) => Ok(Read::Found(r)),
                // Released (punched) since `locate`: the reader retries.
                Err(_) if s.is_collected_at(p.file, p.offset) => Ok(Read::Collected),
                Err(e) => Err(e),
            }
        }
    }
}

/// Bytes a merge reads at once from a file it copies records out of
/// ([`read_windowed`]).
const COPY_WINDOW_BYTES: u64 = 256 << 10;

/// What a job copying records out of files in their order (a merge moving
/// GC victims' records, UniKV, ICDE '20, §III-C) has read ahead: a window per file,
/// so that the records it copies in key order, which lie in file order
/// within each victim, take one read per window instead of one each.
#[derive(Default)]
pub(crate) struct CopyWindows {
    windows: HashMap<u64, (u64, Vec<u8>)>,
}

/// Reads and checks the record `p` points at like [`read_one`], from
/// `windows` when a window of its file holds it, or else by reading a new
/// window from the record on (up to [`COPY_WINDOW_BYTES`], within the
/// file's valid bytes). A collected file is `Corruption`, as for
/// [`crate::value::ValueStore::read`].
pub(crate) fn read_windowed<S: RecordFiles + ?Sized>(
    s: &S,
    p: &ValuePointer,
    key: &[u8],
    windows: &mut CopyWindows,
    class: IoClass,
) -> Result<OwnedRecord> {
    let limit = match s.locate(p, key)? {
        Located::InFile { limit } => limit,
        Located::Buffered(r) => return Ok(r),
        Located::Moved(_) | Located::Collected => {
            return match read_one(s, p, key, class)? {
                Read::Found(r) => Ok(r),
                Read::Collected => Err(collected_error(&s.file_path(p.file), p)),
            };
        }
    };
    let len = u64::from(p.record_len);
    let end = p.offset.saturating_add(len);
    check_within(p, limit, || s.file_path(p.file))?;
    let held = windows
        .windows
        .get(&p.file)
        .is_some_and(|(start, data)| p.offset >= *start && end <= start + data.len() as u64);
    if !held {
        let Some(reader) = reader_or_collected(s, p.file)? else {
            return Err(collected_error(&s.file_path(p.file), p));
        };
        let want = (limit - p.offset).min(COPY_WINDOW_BYTES).max(len);
        let data = reader.read_at(p.offset, want as usize, class)?;
        windows.windows.insert(p.file, (p.offset, data));
    }
    let (start, data) = &windows.windows[&p.file];
    let at = (p.offset - start) as usize;
    check_record(&data[at..at + len as usize], p, key, &s.file_path(p.file))
}

/// Where the page cache cannot be asked: a read of a run taking longer
/// than this did not come from it, and the remaining runs of a batch are
/// read in parallel.
const SLOW_READ: std::time::Duration = std::time::Duration::from_micros(40);

/// Records further apart than this are read separately.
const COALESCE_GAP_BYTES: u64 = 4096;
/// The largest single read of a run of records.
const COALESCE_MAX_BYTES: u64 = 1 << 20;

/// Reads many records at once (WiscKey, FAST '16, §3.3.1): pointers into the same
/// file whose records lie close together are read with one read, and the
/// reads that would wait on the device run in parallel on the prefetch
/// threads. Results are in request order; each is checked like
/// [`read_one`], a collected file being `Corruption` (scans are registered
/// readers).
pub(crate) fn read_many<S: RecordFiles + ?Sized>(
    s: &S,
    requests: &[(ValuePointer, &[u8])],
    class: IoClass,
) -> Vec<Result<Vec<u8>>> {
    let mut out: Vec<Option<Result<Vec<u8>>>> = vec![None; requests.len()];
    let mut pending: Vec<usize> = Vec::new();
    // Pointers GC moved are read where the records are now.
    let mut moved: Vec<(ValuePointer, &[u8])> = Vec::new();
    for (i, (p, key)) in requests.iter().enumerate() {
        match s.locate(p, key) {
            Ok(Located::InFile { .. }) => pending.push(i),
            Ok(Located::Moved(q)) => {
                if moved.is_empty() {
                    moved = requests.to_vec();
                }
                moved[i].0 = q;
                pending.push(i);
            }
            Ok(Located::Buffered(r)) => out[i] = Some(Ok(r.value)),
            Ok(Located::Collected) => {
                out[i] = Some(Err(collected_error(&s.file_path(p.file), p)));
            }
            Err(e) => out[i] = Some(Err(e)),
        }
    }
    let requests: &[(ValuePointer, &[u8])] = if moved.is_empty() { requests } else { &moved };
    pending.sort_by_key(|&i| (requests[i].0.file, requests[i].0.offset));
    let runs = coalesce(&pending, |i| &requests[i].0);
    let read = |run: &Vec<usize>| answer_run(s, run, requests, fetch_run(s, run, requests, class));
    // Runs whose bytes are in the page cache are read here, one after
    // another: handing them to threads costs more than it saves on a few
    // cores. Only runs that would wait on the device go to the prefetch
    // threads, in parallel (a cold device, §3.3.1). The page cache is
    // asked with a read that must not wait; where the file system cannot
    // answer, the first read slower than `SLOW_READ` sends the rest over.
    let mut done: Vec<Vec<(usize, Result<Vec<u8>>)>> = Vec::with_capacity(runs.len());
    let mut cold: Vec<&Vec<usize>> = Vec::new();
    let mut ask_cache = true;
    let mut slow = false;
    for run in &runs {
        if slow {
            cold.push(run);
            continue;
        }
        if ask_cache {
            match fetch_run_cached(s, run, requests, class) {
                Some(CachedFetch::Got(data)) => {
                    done.push(answer_run(s, run, requests, data));
                    continue;
                }
                Some(CachedFetch::WouldWait) => {
                    cold.push(run);
                    continue;
                }
                None => ask_cache = false,
            }
        }
        let t = std::time::Instant::now();
        done.push(read(run));
        slow = t.elapsed() > SLOW_READ;
    }
    if cold.len() == 1 {
        done.push(read(cold[0]));
    } else if !cold.is_empty() {
        use rayon::prelude::*;
        let rest: Vec<_> = s
            .readers()
            .pool()
            .install(|| cold.par_iter().map(|run| read(run)).collect());
        done.extend(rest);
    }
    for (i, r) in done.into_iter().flatten() {
        out[i] = Some(r);
    }
    out.into_iter()
        .map(|r| r.expect("every request answered"))
        .collect()
}

/// The bytes of a run: from its first record's start to its last one's end.
fn run_span(run: &[usize], requests: &[(ValuePointer, &[u8])]) -> (u64, usize) {
    let start = requests[run[0]].0.offset;
    let end = run
        .iter()
        .map(|&i| requests[i].0.offset + u64::from(requests[i].0.record_len))
        .max()
        .expect("runs are not empty");
    (start, (end - start) as usize)
}

/// Reads one run of nearby records of one file with a single read.
fn fetch_run<S: RecordFiles + ?Sized>(
    s: &S,
    run: &[usize],
    requests: &[(ValuePointer, &[u8])],
    class: IoClass,
) -> Result<Vec<u8>> {
    let first = &requests[run[0]].0;
    let (start, len) = run_span(run, requests);
    match reader_or_collected(s, first.file) {
        Ok(Some(r)) => r.read_at(start, len, class),
        Ok(None) => Err(collected_error(&s.file_path(first.file), first)),
        Err(e) => Err(e),
    }
}

/// What [`fetch_run_cached`] found.
enum CachedFetch {
    /// The run's bytes (or the error that answers it).
    Got(Result<Vec<u8>>),
    /// Reading the run would wait on the device.
    WouldWait,
}

/// Like [`fetch_run`], only if the bytes are in the page cache; `None`
/// when the file system cannot tell.
fn fetch_run_cached<S: RecordFiles + ?Sized>(
    s: &S,
    run: &[usize],
    requests: &[(ValuePointer, &[u8])],
    class: IoClass,
) -> Option<CachedFetch> {
    let first = &requests[run[0]].0;
    let (start, len) = run_span(run, requests);
    let reader = match reader_or_collected(s, first.file) {
        Ok(Some(r)) => r,
        Ok(None) => {
            let e = collected_error(&s.file_path(first.file), first);
            return Some(CachedFetch::Got(Err(e)));
        }
        Err(e) => return Some(CachedFetch::Got(Err(e))),
    };
    match reader.read_at_cached(start, len, class) {
        Ok(CachedRead::Data(d)) => Some(CachedFetch::Got(Ok(d))),
        Ok(CachedRead::WouldWait) => Some(CachedFetch::WouldWait),
        Ok(CachedRead::Unsupported) => None,
        Err(e) => Some(CachedFetch::Got(Err(e))),
    }
}

/// Checks each record of a run in the run's bytes.
fn answer_run<S: RecordFiles + ?Sized>(
    s: &S,
    run: &[usize],
    requests: &[(ValuePointer, &[u8])],
    data: Result<Vec<u8>>,
) -> Vec<(usize, Result<Vec<u8>>)> {
    let start = requests[run[0]].0.offset;
    // The path only for an error: this runs once per value of a scan.
    let bad = |p: &ValuePointer, why: String| Error::corruption(s.file_path(p.file), p.offset, why);
    run.iter()
        .map(|&i| {
            let (p, key) = &requests[i];
            let r = data.as_ref().map_err(Clone::clone).and_then(|d| {
                let at = (p.offset - start) as usize;
                let raw = d
                    .get(at..at + p.record_len as usize)
                    .ok_or_else(|| bad(p, "value store file shorter than expected".into()))?;
                checked_record(raw, p, key)
                    .map(|r| r.value.to_vec())
                    .map_err(|why| bad(p, why))
            });
            (i, r)
        })
        .collect()
}

/// Groups `sorted` (requests ordered by file and offset) into runs, each
/// read with one read: same file, gaps of at most [`COALESCE_GAP_BYTES`],
/// at most [`COALESCE_MAX_BYTES`] (or one record, if larger).
pub(crate) fn coalesce<'a>(
    sorted: &[usize],
    ptr: impl Fn(usize) -> &'a ValuePointer,
) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut run_start = 0u64;
    let mut run_end = 0u64;
    for &i in sorted {
        let p = ptr(i);
        let end = p.offset + u64::from(p.record_len);
        let joins = runs.last().is_some_and(|r| {
            let last = ptr(*r.last().expect("runs are not empty"));
            last.file == p.file
                && p.offset <= run_end + COALESCE_GAP_BYTES
                && end.max(run_end) - run_start <= COALESCE_MAX_BYTES
        });
        if joins {
            runs.last_mut().expect("checked").push(i);
            run_end = run_end.max(end);
        } else {
            runs.push(vec![i]);
            run_start = p.offset;
            run_end = end;
        }
    }
    runs
}

/// The checksum stored at the start of the record `p` points at (to tell
/// apart records of one key and length without reading them whole).
pub(crate) fn stored_crc<S: RecordFiles + ?Sized>(
    s: &S,
    p: &ValuePointer,
    class: IoClass,
) -> Result<u32> {
    let r = s.readers().get_with(p.file, || s.file_path(p.file))?;
    let head = r.read_at(p.offset, 4, class)?;
    if head.len() < 4 {
        return Err(Error::corruption(
            s.file_path(p.file),
            p.offset,
            "value record cut short",
        ));
    }
    Ok(crate::coding::u32_at(&head, 0))
}

/// Checks the valid range of a pointer into a file of `limit` bytes.
pub(crate) fn check_within(
    p: &ValuePointer,
    limit: u64,
    path: impl FnOnce() -> PathBuf,
) -> Result<()> {
    let end = p.offset.saturating_add(u64::from(p.record_len));
    if end > limit {
        return Err(Error::corruption(
            path(),
            p.offset,
            format!("value pointer ends at {end}, past the file's {limit} bytes"),
        ));
    }
    Ok(())
}

/// Cuts a torn tail off the value store file `number` of `len` bytes
/// (recovery): a crash may leave an incomplete record at the end of the
/// newest file, and a sealed file must end on a record boundary so that GC
/// and `verify` can treat any incomplete record as damage. The whole
/// records are copied to a temporary file (numbered `tmp_number`) that
/// replaces the torn one by rename, so a crash meanwhile leaves one or the
/// other. Returns the new length, or `None` when there was nothing to cut
/// (a file whose damage is no torn tail stays for replay and `verify`).
/// Records before `floor` were synced before an installed edit: a bad one
/// there is damage, not a tear, and is not cut either.
pub(crate) fn cut_torn_tail<S: RecordFiles + ?Sized>(
    s: &S,
    fs: &CountingFs,
    number: u64,
    len: u64,
    floor: u64,
    tmp_number: u64,
) -> Result<Option<u64>> {
    let path = s.file_path(number);
    // Every open asks this of the newest files (a hash layout's: one per
    // group), and after a clean close none is torn: look at the end first.
    if ends_on_a_record(&fs.open(&path)?, len)? {
        return Ok(None);
    }
    let data = fs.read_all(&path, IoClass::ValueStore)?;
    let cut = match super::log::reader::scan_file(&data, &path) {
        Ok(scan) if scan.damage.is_none() => scan.torn_tail_at.filter(|&c| c < len),
        _ => None,
    };
    let Some(cut) = cut.filter(|&c| c >= floor) else {
        return Ok(None);
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = crate::filename::temp(dir, tmp_number);
    let mut f = fs.create(&tmp, IoClass::ValueStore)?;
    f.append(&data[..cut as usize])?;
    f.sync()?;
    drop(f);
    fs.rename(&tmp, &path)?;
    fs.sync_dir(dir)?;
    s.readers().forget(number);
    Ok(Some(cut))
}

/// Bytes at the end of a file searched for a record ending at its end.
const TAIL_WINDOW_BYTES: u64 = 64 << 10;

/// True when a whole, checksummed record ends exactly at the file's end
/// (`len` bytes), found in its last [`TAIL_WINDOW_BYTES`]: then the file
/// ends on a record boundary and holds no torn tail. `false` means "scan to
/// know" (a torn tail, a last record larger than the window, or a file with
/// no record). A torn prefix of real records never ends in a valid record
/// unless it ends on a boundary, so the answer `true` is safe; were it
/// wrong for a crafted value, GC and `verify` would still stop at the
/// incomplete record, never collect it.
fn ends_on_a_record(file: &CountedReader, len: u64) -> Result<bool> {
    use crate::record::{claimed_len, decode_record, FILE_HEADER_LEN};
    let body = len.saturating_sub(FILE_HEADER_LEN as u64);
    if body == 0 {
        return Ok(false);
    }
    let window = body.min(TAIL_WINDOW_BYTES);
    let data = file.read_at(len - window, window as usize, IoClass::ValueStore)?;
    Ok((0..data.len()).any(|q| {
        claimed_len(&data[q..]) == Some(data.len() - q) && decode_record(&data[q..]).is_ok()
    }))
}
