//! Reads value log records: one by pointer (lookups, with WiscKey's checks,
//! WiscKey, FAST '16, §3.3.3), or all of a file in order (GC and recovery).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::{CountedReader, IoClass};
use crate::pointer::ValuePointer;
use crate::record::{
    check_file_header, claimed_len, decode_record, file_header, kind_of, Bad, Record,
    FILE_HEADER_LEN, FLAG_GC_COPY, FLAG_INLINE, KIND_PUT, KIND_RELOCATE_RUN, RECORD_HEADER_LEN,
};

/// An owned record read back by pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnedRecord {
    pub(crate) seq: u64,
    pub(crate) flags: u8,
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
}

impl OwnedRecord {
    /// A copy GC made; replay skips it.
    pub(crate) fn is_gc_copy(&self) -> bool {
        self.flags & FLAG_GC_COPY != 0
    }
    /// See [`may_be_live`].
    pub(crate) fn may_be_live(&self) -> bool {
        may_be_live(self.flags)
    }
}

/// True for a record of `flags` whose value the index may point at (a put,
/// not inline): the only records GC may have to keep.
pub(crate) fn may_be_live(flags: u8) -> bool {
    kind_of(flags) == KIND_PUT && flags & FLAG_INLINE == 0
}

/// Checks the record bytes read for `p` and that they belong to `key`.
/// Any mismatch is `Corruption` at the pointer's offset: an index entry must
/// never yield another key's value.
pub(crate) fn check_record(
    raw: &[u8],
    p: &ValuePointer,
    key: &[u8],
    path: &Path,
) -> Result<OwnedRecord> {
    checked_record(raw, p, key)
        .map(owned)
        .map_err(|why| Error::corruption(path, p.offset, why))
}

pub(crate) fn owned(r: Record<'_>) -> OwnedRecord {
    OwnedRecord {
        seq: r.seq,
        flags: r.flags,
        key: r.key.to_vec(),
        value: r.value.to_vec(),
    }
}

/// The record `raw` holds, if it is the one `p` names: it decodes, and its
/// length and checksum are the pointer's; else why not.
fn pointed_record<'a>(raw: &'a [u8], p: &ValuePointer) -> std::result::Result<Record<'a>, String> {
    let (r, len) = decode_record(raw).map_err(|b| match b {
        Bad::Incomplete => "value record shorter than its pointer says".to_string(),
        Bad::Damaged(why) => why,
    })?;
    if len != p.record_len as usize || crate::coding::u32_at(raw, 0) != p.record_crc {
        return Err("value record does not match its pointer".into());
    }
    Ok(r)
}

/// The key of the GC copy `raw` that a relocation run's pointer `p` names
/// (replay reads it: the run holds pointers alone). The record must be
/// the pointer's and a separated put GC copied; anything else is
/// `Corruption` at `p`.
pub(crate) fn copy_key(raw: &[u8], p: &ValuePointer, path: &Path) -> Result<Vec<u8>> {
    pointed_record(raw, p)
        .and_then(|r| {
            if may_be_live(r.flags) && r.flags & FLAG_GC_COPY != 0 {
                Ok(r.key.to_vec())
            } else {
                Err(format!(
                    "relocation run points at a record of flags {:#04x}, not a GC copy",
                    r.flags
                ))
            }
        })
        .map_err(|why| Error::corruption(path, p.offset, why))
}

/// [`check_record`] without copying: the record, or why it is damaged.
pub(crate) fn checked_record<'a>(
    raw: &'a [u8],
    p: &ValuePointer,
    key: &[u8],
) -> std::result::Result<Record<'a>, String> {
    let r = pointed_record(raw, p)?;
    if r.key != key {
        return Err("value record belongs to another key".into());
    }
    if r.kind() != KIND_PUT {
        return Err(format!(
            "pointer to a value record of kind {}, not a put",
            r.kind()
        ));
    }
    Ok(r)
}

/// Reads the record `p` points at from `file`, whose valid bytes are the
/// first `limit` (as the store counts them: not the length the reader saw
/// when it was opened, since a head file grows), and checks it. `path`
/// builds the file's path for an error only (point reads call this once
/// per value).
pub(crate) fn read_record(
    file: &CountedReader,
    path: impl Fn() -> PathBuf,
    p: &ValuePointer,
    key: &[u8],
    limit: u64,
    class: IoClass,
) -> Result<OwnedRecord> {
    let end = p.offset.checked_add(u64::from(p.record_len));
    if p.offset < FILE_HEADER_LEN as u64 || end.is_none_or(|e| e > limit) {
        return Err(Error::corruption(
            path(),
            p.offset,
            format!(
                "value pointer ({}, {}) outside the log file of {} bytes",
                p.offset, p.record_len, limit
            ),
        ));
    }
    let raw = file.read_at(p.offset, p.record_len as usize, class)?;
    checked_record(&raw, p, key)
        .map(owned)
        .map_err(|why| Error::corruption(path(), p.offset, why))
}

/// All records of a log file held in memory, in order.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// (offset, record length, record).
    pub(crate) records: Vec<(u64, u32, OwnedRecord)>,
    /// The file ends in an incomplete or damaged record at this offset with
    /// nothing valid after it (a torn tail).
    pub(crate) torn_tail_at: Option<u64>,
    /// Damage followed by valid records: offset and reason.
    pub(crate) damage: Option<(u64, String)>,
}

/// Parses a whole file. After damage, the rest is searched for any valid
/// record: one found means the damage is not a torn tail.
pub(crate) fn scan_file(data: &[u8], path: &Path) -> Result<Scan> {
    scan_file_from(data, path, FILE_HEADER_LEN as u64)
}

/// [`scan_file`] from offset `start` (a record boundary past the header):
/// what lies before it was collected, and may be a punched hole.
pub(crate) fn scan_file_from(data: &[u8], path: &Path, start: u64) -> Result<Scan> {
    let mut records = Vec::new();
    let end = visit_file_from(
        data.len() as u64,
        path,
        start,
        usize::MAX, // all of it at once: it is in memory
        &mut Vec::new(),
        |off, n, _| Ok(Cow::Borrowed(&data[off as usize..off as usize + n])),
        |off, raw, r| {
            records.push((
                off,
                raw.len() as u32,
                OwnedRecord {
                    seq: r.seq,
                    flags: r.flags,
                    key: r.key.to_vec(),
                    value: r.value.to_vec(),
                },
            ))
        },
    )?;
    Ok(Scan {
        records,
        torn_tail_at: end.torn_tail_at,
        damage: end.damage,
    })
}

/// A record that does not decode at file offset `at` (`rest`: the file
/// from there to its end): a torn tail if no valid record follows, else
/// damage. Returns (torn tail at, damage).
fn classify_bad(rest: &[u8], at: u64, b: Bad) -> (Option<u64>, Option<(u64, String)>) {
    // Every offset after the damage is a candidate; the cheap checks (a
    // length that fits, a known kind) come before the checksum, so damage
    // in a large file costs a pass over it, not a checksum per byte.
    let valid_after = (1..rest.len()).any(|q| {
        claimed_len(&rest[q..]).is_some_and(|l| q + l <= rest.len())
            && kind_of(rest[q + 12]) <= KIND_RELOCATE_RUN
            && decode_record(&rest[q..]).is_ok()
    });
    if valid_after {
        let why = match b {
            Bad::Incomplete => "value record length runs past valid data".into(),
            Bad::Damaged(w) => w,
        };
        (None, Some((at, why)))
    } else {
        (Some(at), None)
    }
}

/// How a [`visit_file`] ended: as [`Scan`], without the records.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ScanEnd {
    pub(crate) torn_tail_at: Option<u64>,
    pub(crate) damage: Option<(u64, String)>,
}

/// Visits every record of a file of `len` bytes in order, as
/// [`scan_file`] sees them, reading it `chunk` bytes at a time through
/// `read(offset, len, buf)`, which leaves exactly those bytes in `buf`: one
/// buffer, reused chunk after chunk (fresh ones cost page faults and
/// zeroing, about 5% of the hashkv preset's CPU in its GC's scans), so
/// memory is one chunk (or one record, if larger), not the file. `f` gets
/// (offset, the record's bytes, the record). On a record that does not
/// decode, the rest of the file is read whole to tell a torn tail from
/// damage (the rare path).
/// The reads start from `scratch`'s memory and leave theirs there, for the
/// caller's next file.
pub(crate) fn visit_file(
    len: u64,
    path: &Path,
    chunk: usize,
    scratch: &mut Vec<u8>,
    read: impl Fn(u64, usize, &mut Vec<u8>) -> Result<()>,
    f: impl FnMut(u64, &[u8], Record<'_>),
) -> Result<ScanEnd> {
    let read = |off, n, mut buf: Vec<u8>| {
        read(off, n, &mut buf)?;
        debug_assert_eq!(buf.len(), n, "a visit's read leaves the bytes asked");
        Ok(Cow::Owned(buf))
    };
    let start = FILE_HEADER_LEN as u64;
    visit_file_from(len, path, start, chunk, scratch, read, f)
}

/// [`visit_file`] from offset `start` (as [`scan_file_from`]), with reads
/// that may borrow (a file already in memory); an owned read gets the
/// buffer of the one before to reuse.
fn visit_file_from<'d>(
    len: u64,
    path: &Path,
    start: u64,
    chunk: usize,
    scratch: &mut Vec<u8>,
    read: impl Fn(u64, usize, Vec<u8>) -> Result<Cow<'d, [u8]>>,
    mut f: impl FnMut(u64, &[u8], Record<'_>),
) -> Result<ScanEnd> {
    let header = read(0, FILE_HEADER_LEN.min(len as usize), Vec::new())?;
    if len < FILE_HEADER_LEN as u64 && file_header().starts_with(&header) {
        // Created, and a crash kept only part of its unsynced header: it
        // never held a record.
        return Ok(ScanEnd::default());
    }
    check_file_header(&header).map_err(|why| Error::corruption(path, 0, why))?;
    let chunk = chunk.max(RECORD_HEADER_LEN);
    let mut pos = start.clamp(FILE_HEADER_LEN as u64, len.max(FILE_HEADER_LEN as u64));
    let mut buf: Cow<'d, [u8]> = {
        let mut v = std::mem::take(scratch);
        v.clear();
        Cow::Owned(v)
    };
    let mut buf_at = pos; // file offset of buf[0]
    let keep = |buf: Cow<'d, [u8]>, scratch: &mut Vec<u8>| {
        if let Cow::Owned(v) = buf {
            *scratch = v;
        }
    };
    while pos < len {
        let rel = (pos - buf_at) as usize;
        let have = &buf[rel..];
        match decode_record(have) {
            Ok((r, n)) => {
                f(pos, &have[..n], r);
                pos += n as u64;
            }
            Err(Bad::Incomplete) if buf_at + (buf.len() as u64) < len => {
                // Read on from `pos`: a chunk, or the whole record if the
                // header claims more (never past the file's end).
                let need = claimed_len(have).unwrap_or(RECORD_HEADER_LEN).max(chunk);
                let n = (need as u64).min(len - pos) as usize;
                let reuse = match std::mem::take(&mut buf) {
                    Cow::Owned(v) => v,
                    Cow::Borrowed(_) => Vec::new(),
                };
                buf = read(pos, n, reuse)?;
                buf_at = pos;
            }
            Err(b) => {
                keep(buf, scratch);
                let rest = read(pos, (len - pos) as usize, Vec::new())?;
                let (torn_tail_at, damage) = classify_bad(&rest, pos, b);
                return Ok(ScanEnd {
                    torn_tail_at,
                    damage,
                });
            }
        }
    }
    keep(buf, scratch);
    Ok(ScanEnd::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{CountingFs, MemFs};
    use crate::record::{Record, KIND_DELETE, KIND_PUT, KIND_RELOCATE, KIND_RELOCATE_RUN};
    use crate::value::log::writer::VlogWriter;
    use std::sync::Arc;

    type Written = Vec<(ValuePointer, Vec<u8>, Vec<u8>)>;

    #[test]
    fn a_file_with_part_of_its_header_holds_nothing() {
        // A crash can keep a prefix of a new file's unsynced header: no
        // record, no damage. Anything else that short is damage.
        let h = file_header();
        let path = Path::new("/000030.vlog");
        for n in 0..FILE_HEADER_LEN {
            let data = &h[..n];
            let scan = scan_file(data, path).unwrap();
            assert!(scan.records.is_empty(), "{n} bytes");
            assert_eq!(scan.torn_tail_at, None, "{n} bytes");
            assert_eq!(scan.damage, None, "{n} bytes");
        }
        let mut bad = h[..10].to_vec();
        bad[3] ^= 1;
        let err = scan_file(&bad, path).unwrap_err();
        assert!(err.to_string().contains("bad magic"), "{err}");
    }

    fn setup() -> (MemFs, CountingFs, VlogWriter, Written) {
        let mem = MemFs::new();
        let fs = CountingFs::new(Arc::new(mem.clone()));
        let f = fs
            .create(Path::new("/000009.vlog"), IoClass::ValueStore)
            .unwrap();
        let mut w = VlogWriter::new(f, 9, 4096);
        let mut out = vec![];
        for i in 0..40u64 {
            let k = format!("key{i}").into_bytes();
            let v = vec![b'a' + (i % 26) as u8; (i * 7) as usize];
            let p = w
                .append(&Record {
                    seq: 100 + i,
                    flags: KIND_PUT,
                    key: &k,
                    value: &v,
                })
                .unwrap();
            out.push((p, k, v));
        }
        (mem, fs, w, out)
    }

    #[test]
    fn a_pointer_to_a_record_that_is_not_a_put_is_corruption() {
        let (_mem, _fs, mut w, _) = setup();
        let path = Path::new("/000009.vlog");
        for kind in [KIND_DELETE, KIND_RELOCATE, KIND_RELOCATE_RUN] {
            let p = w
                .append(&Record {
                    seq: 7,
                    flags: kind,
                    key: b"k",
                    value: b"",
                })
                .unwrap();
            let raw = w.read_buffered(p.offset, p.record_len as usize).unwrap();
            let e = check_record(&raw, &p, b"k", path).unwrap_err();
            assert!(
                e.is_corruption() && e.to_string().contains("not a put"),
                "{e}"
            );
        }
    }

    #[test]
    fn buffered_then_written_records_read_back_by_pointer() {
        let (_mem, fs, mut w, recs) = setup();
        let path = Path::new("/000009.vlog");
        // The last records are still buffered.
        let (p, k, v) = recs.last().unwrap();
        let raw = w.read_buffered(p.offset, p.record_len as usize).unwrap();
        assert_eq!(check_record(&raw, p, k, path).unwrap().value, *v);
        w.write_out().unwrap();
        let file = fs.open(path).unwrap();
        for (p, k, v) in &recs {
            let r =
                read_record(&file, || path.into(), p, k, file.len(), IoClass::UserRead).unwrap();
            assert_eq!(&r.value, v);
        }
        // The wrong key, or a pointer past the end, is corruption.
        let (p, _, _) = &recs[3];
        assert!(read_record(
            &file,
            || path.into(),
            p,
            b"other",
            file.len(),
            IoClass::UserRead
        )
        .unwrap_err()
        .is_corruption());
        let mut far = *p;
        far.offset = file.len();
        assert!(read_record(
            &file,
            || path.into(),
            &far,
            b"key3",
            file.len(),
            IoClass::UserRead
        )
        .unwrap_err()
        .is_corruption());
    }

    #[test]
    fn scan_classifies_torn_tails_and_damage() {
        let (mem, _fs, mut w, recs) = setup();
        w.sync().unwrap();
        let data = mem.contents(Path::new("/000009.vlog")).unwrap();
        let path = Path::new("x");
        let s = scan_file(&data, path).unwrap();
        assert_eq!(s.records.len(), recs.len());
        assert!(s.torn_tail_at.is_none() && s.damage.is_none());
        for cut in (FILE_HEADER_LEN..data.len()).step_by(13) {
            let s = scan_file(&data[..cut], path).unwrap();
            assert!(s.damage.is_none(), "cut {cut}");
            assert!(s.records.iter().zip(&recs).all(|(a, b)| a.2.key == b.1));
        }
        let mut d = data.clone();
        d[recs[5].0.offset as usize + 30] ^= 4;
        let s = scan_file(&d, path).unwrap();
        assert_eq!(s.records.len(), 5);
        assert_eq!(s.damage.unwrap().0, recs[5].0.offset);
    }

    /// [`visit_file`] read in chunks sees what [`scan_file`] sees of the
    /// whole file: the same records at the same offsets and the same end,
    /// for every chunk size, cut and flipped byte tried.
    #[test]
    fn chunked_visits_match_whole_file_scans() {
        let (mem, _fs, mut w, _) = setup();
        w.sync().unwrap();
        let data = mem.contents(Path::new("/000009.vlog")).unwrap();
        let path = Path::new("x");
        // One scratch buffer for every visit, as GC's scans share one: what
        // a visit leaves in it must not leak into the next.
        let mut scratch = Vec::new();
        let mut check = |d: &[u8], chunk: usize, what: &str| {
            let whole = scan_file(d, path).unwrap();
            let mut seen = Vec::new();
            let end = visit_file(
                d.len() as u64,
                path,
                chunk,
                &mut scratch,
                |off, n, buf| {
                    buf.clear();
                    buf.extend_from_slice(&d[off as usize..off as usize + n]);
                    Ok(())
                },
                |off, raw, r| {
                    assert_eq!(raw.len(), claimed_len(raw).unwrap());
                    seen.push((off, raw.len() as u32, r.key.to_vec(), r.value.to_vec()));
                },
            )
            .unwrap();
            let want: Vec<_> = whole
                .records
                .iter()
                .map(|(o, n, r)| (*o, *n, r.key.clone(), r.value.clone()))
                .collect();
            assert_eq!(seen, want, "{what}, chunk {chunk}");
            assert_eq!(
                (end.torn_tail_at, end.damage),
                (whole.torn_tail_at, whole.damage),
                "{what}, chunk {chunk}"
            );
        };
        for chunk in [1, 7, 64, 300, 1 << 20] {
            check(&data, chunk, "whole file");
            for cut in (FILE_HEADER_LEN..data.len()).step_by(29) {
                check(&data[..cut], chunk, &format!("cut at {cut}"));
            }
            for flip in (FILE_HEADER_LEN..data.len()).step_by(37) {
                let mut d = data.clone();
                d[flip] ^= 0x10;
                check(&d, chunk, &format!("byte {flip} flipped"));
            }
        }
    }
}
