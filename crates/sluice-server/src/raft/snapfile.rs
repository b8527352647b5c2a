//! A snapshot archive: the files of a checkpoint, one after another, each
//! with its name, length and checksum (`docs/format/raft-snapshot.md`).
//! It is the form a snapshot takes on the wire only: a node keeps its
//! snapshot as a checkpoint directory, a [`Packer`] reads that directory
//! as the archive's bytes while openraft sends them in chunks of
//! [`CHUNK_BYTES`], and the receiver's [`Unpacker`] writes the files
//! straight into the directory being installed. No snapshot is ever one
//! blob in memory, nor an archive on disk.
//!
//! ```text
//! "SLSNAP01"
//! per file:  0x01 | name_len u16 LE | name | len u64 LE | bytes | crc32c u32 LE
//! end:       0x00 | files u32 LE
//! ```

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

pub const MAGIC: &[u8; 8] = b"SLSNAP01";
const FILE_RECORD: u8 = 1;
const END_RECORD: u8 = 0;
/// Bytes per install-snapshot message (each is one round trip, and the
/// receiver beats its election timer per message).
pub const CHUNK_BYTES: u64 = 4 << 20;
const BUF_BYTES: usize = 256 << 10;
/// An unpacked file's writeback is started every this many bytes
/// (`sync_file_range`), so that the syncs at the archive's end find most
/// of it on the disk already.
const WRITEBACK_BYTES: u64 = 8 << 20;
/// Files unpacked whole and not yet synced, at most: beyond them the
/// oldest is synced at once (each holds a descriptor until its sync).
const UNSYNCED_FILES: usize = 256;
/// Bytes of a file record before its data: kind, name length, length.
const RECORD_HEAD_BYTES: u64 = 1 + 2 + 8;
/// Bytes of a file record after its data: the checksum.
const RECORD_TAIL_BYTES: u64 = 4;
/// Bytes of the end record: kind, file count.
const END_BYTES: u64 = 1 + 4;

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut names: Vec<_> = std::fs::read_dir(root.join(rel))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    names.sort();
    for n in names {
        let r = rel.join(&n);
        if root.join(&r).is_dir() {
            walk(root, &r, out)?;
        } else {
            out.push(r);
        }
    }
    Ok(())
}

/// Packs every file under `dir` into `archive` (created, synced). Returns
/// the archive's length in bytes.
pub fn pack(dir: &Path, archive: &Path) -> std::io::Result<u64> {
    let mut p = Packer::open(dir)?;
    let mut w = BufWriter::with_capacity(BUF_BYTES, File::create(archive)?);
    let mut buf = vec![0u8; BUF_BYTES];
    loop {
        let n = p.read(&mut buf)?;
        if n == 0 {
            break;
        }
        w.write_all(&buf[..n])?;
    }
    let f = w.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    Ok(p.archive_len())
}

/// One file of a [`Packer`]: open from the start (a snapshot replaced
/// while it is sent goes on being read through these handles).
struct Packed {
    name: String,
    file: File,
    len: u64,
    /// Where its record begins in the archive.
    at: u64,
    /// Its checksum, once read whole.
    crc: Option<u32>,
}

impl Packed {
    fn data_at(&self) -> u64 {
        self.at + RECORD_HEAD_BYTES + self.name.len() as u64
    }

    fn end(&self) -> u64 {
        self.data_at() + self.len + RECORD_TAIL_BYTES
    }
}

/// A checkpoint directory read as its archive, from any offset: the
/// layout follows from the names and lengths (taken when it is opened),
/// each file's checksum is taken as its bytes are read in order (a seek
/// into a file's middle, openraft resending a chunk, reads the file's
/// start again for it). The files are immutable (a checkpoint's), and a
/// file found shorter than when opened is an error.
pub struct Packer {
    dir: PathBuf,
    files: Vec<Packed>,
    total: u64,
    /// The next byte read is at this offset.
    pos: u64,
    /// The checksum of file `.0`'s bytes before offset `.1` of it.
    running: Option<(usize, u64, u32)>,
}

impl Packer {
    /// Opens every file under `dir` (sorted walk).
    pub fn open(dir: &Path) -> std::io::Result<Packer> {
        let mut rels = Vec::new();
        walk(dir, Path::new(""), &mut rels)?;
        let mut files = Vec::with_capacity(rels.len());
        let mut at = MAGIC.len() as u64;
        for rel in rels {
            let name = rel
                .to_str()
                .ok_or_else(|| std::io::Error::other(format!("{}: not UTF-8", rel.display())))?
                .to_owned();
            if u16::try_from(name.len()).is_err() {
                return Err(std::io::Error::other(format!("{name}: name too long")));
            }
            let file = File::open(dir.join(&rel))?;
            let len = file.metadata()?.len();
            let f = Packed {
                name,
                file,
                len,
                at,
                crc: None,
            };
            at = f.end();
            files.push(f);
        }
        Ok(Packer {
            dir: dir.to_path_buf(),
            files,
            total: at + END_BYTES,
            pos: 0,
            running: None,
        })
    }

    /// The archive's length in bytes.
    pub fn archive_len(&self) -> u64 {
        self.total
    }

    /// Bytes of the files packed (the archive less its framing).
    pub fn file_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len).sum()
    }

    /// Moves to `pos` (at most the length).
    pub fn seek(&mut self, pos: u64) -> std::io::Result<u64> {
        if pos > self.total {
            return Err(std::io::Error::other(format!(
                "{}: seek to {pos} past the archive's end {}",
                self.dir.display(),
                self.total
            )));
        }
        self.pos = pos;
        Ok(pos)
    }

    /// Where the next byte read is.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Reads the archive's next bytes into `buf`: as many as fit, 0 at
    /// its end.
    pub fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() && self.pos < self.total {
            let n = self.read_some(&mut buf[done..])?;
            done += n;
            self.pos += n as u64;
        }
        Ok(done)
    }

    /// Some bytes at `pos`, from one field.
    fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let pos = self.pos;
        let small = |field: &[u8], from: u64, buf: &mut [u8]| {
            let field = &field[(pos - from) as usize..];
            let n = field.len().min(buf.len());
            buf[..n].copy_from_slice(&field[..n]);
            n
        };
        if pos < MAGIC.len() as u64 {
            return Ok(small(MAGIC, 0, buf));
        }
        // The file whose record holds `pos`, if any: the last one starting
        // at or before it.
        let i = self.files.partition_point(|f| f.at <= pos);
        if i == 0 || pos >= self.files[i - 1].end() {
            let mut end = [0u8; END_BYTES as usize];
            end[0] = END_RECORD;
            end[1..].copy_from_slice(&(self.files.len() as u32).to_le_bytes());
            return Ok(small(&end, self.total - END_BYTES, buf));
        }
        let i = i - 1;
        let f = &self.files[i];
        let data_at = f.data_at();
        if pos < data_at {
            let mut head = Vec::with_capacity((data_at - f.at) as usize);
            head.push(FILE_RECORD);
            head.extend_from_slice(&(f.name.len() as u16).to_le_bytes());
            head.extend_from_slice(f.name.as_bytes());
            head.extend_from_slice(&f.len.to_le_bytes());
            return Ok(small(&head, f.at, buf));
        }
        if pos < data_at + f.len {
            return self.read_data(i, pos - data_at, buf);
        }
        let crc = self.crc_of(i)?;
        Ok(small(&crc.to_le_bytes(), data_at + self.files[i].len, buf))
    }

    /// Bytes of file `i` from offset `at` of it, its checksum kept.
    fn read_data(&mut self, i: usize, at: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let crc = match self.running {
            Some((j, upto, crc)) if j == i && upto == at => crc,
            _ => self.crc_prefix(i, at)?,
        };
        let f = &mut self.files[i];
        let n = ((f.len - at).min(buf.len() as u64)) as usize;
        f.file.read_exact_at(&mut buf[..n], at).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "{}/{} (changed while sent?): {e}",
                    self.dir.display(),
                    f.name
                ),
            )
        })?;
        let crc = crc32c::crc32c_append(crc, &buf[..n]);
        let upto = at + n as u64;
        if upto == f.len {
            f.crc = Some(crc);
        }
        self.running = Some((i, upto, crc));
        Ok(n)
    }

    /// The checksum of file `i`'s first `upto` bytes, read for it.
    fn crc_prefix(&mut self, i: usize, upto: u64) -> std::io::Result<u32> {
        let f = &self.files[i];
        let mut buf = vec![0u8; BUF_BYTES];
        let (mut crc, mut at) = (0u32, 0u64);
        while at < upto {
            let n = ((upto - at).min(BUF_BYTES as u64)) as usize;
            f.file.read_exact_at(&mut buf[..n], at)?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            at += n as u64;
        }
        Ok(crc)
    }

    fn crc_of(&mut self, i: usize) -> std::io::Result<u32> {
        if let Some(c) = self.files[i].crc {
            return Ok(c);
        }
        let c = self.crc_prefix(i, self.files[i].len)?;
        self.files[i].crc = Some(c);
        Ok(c)
    }
}

/// Unpacks `archive` into `dir` (created; it must not exist), checking
/// every file's checksum and syncing what it writes. Damage is an error
/// naming the archive and the offset.
pub fn unpack(archive: &Path, dir: &Path) -> Result<u64, String> {
    let mut f = File::open(archive).map_err(|e| format!("{}: {e}", archive.display()))?;
    let mut u = Unpacker::new(archive, dir)?;
    let mut buf = vec![0u8; BUF_BYTES];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", archive.display()))?;
        if n == 0 {
            break;
        }
        u.feed(&buf[..n])?;
    }
    u.finish().map(|u| u.file_bytes)
}

/// What an [`Unpacker`] unpacked.
#[derive(Debug, Clone, Copy)]
pub struct Unpacked {
    /// Bytes of the files.
    pub file_bytes: u64,
    /// Time spent syncing them (and their directories).
    pub sync: Duration,
}

/// Where an [`Unpacker`] is in the archive.
enum Step {
    Magic,
    Kind,
    NameLen,
    Name,
    Len,
    Data,
    Crc,
    Count,
    Done,
}

/// Unpacks an archive from its bytes in order, as they come (a snapshot
/// being received unpacks while its chunks arrive): every file checked
/// against its checksum, damage an error naming the archive and the
/// offset. Files are written with their writeback started as they grow,
/// and synced, with their directories, only by [`Unpacker::finish`]:
/// nothing relies on the directory before then (`docs/design.md`,
/// "Snapshots", step 2).
pub struct Unpacker {
    archive: PathBuf,
    dir: PathBuf,
    /// Bytes of the archive taken so far.
    offset: u64,
    step: Step,
    /// The field being gathered, and how long it is.
    small: Vec<u8>,
    want: usize,
    /// Where the current record began.
    record_at: u64,
    name: String,
    path: PathBuf,
    out: Option<BufWriter<File>>,
    /// Bytes of the current file written, and of those whose writeback
    /// was started.
    written: u64,
    written_back: u64,
    /// Files written whole, their syncs left for the end.
    unsynced: VecDeque<(PathBuf, File)>,
    left: u64,
    crc: u32,
    files: u32,
    bytes: u64,
    /// Time spent in syncs so far.
    sync: Duration,
}

impl Unpacker {
    /// An unpacker into `dir` (created; it must not exist) of the archive
    /// named `archive` in errors.
    pub fn new(archive: &Path, dir: &Path) -> Result<Unpacker, String> {
        std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Unpacker {
            archive: archive.to_path_buf(),
            dir: dir.to_path_buf(),
            offset: 0,
            step: Step::Magic,
            small: Vec::new(),
            want: MAGIC.len(),
            record_at: 0,
            name: String::new(),
            path: PathBuf::new(),
            out: None,
            written: 0,
            written_back: 0,
            unsynced: VecDeque::new(),
            left: 0,
            crc: 0,
            files: 0,
            bytes: 0,
            sync: Duration::ZERO,
        })
    }

    /// Bytes of the archive taken so far: the next byte fed is at it.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn corrupt(&self, at: u64, why: &str) -> String {
        format!("{}: {why} at offset {at}", self.archive.display())
    }

    /// Takes the archive's next bytes.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            match self.step {
                Step::Data => {
                    let n = (self.left.min(data.len() as u64)) as usize;
                    self.crc = crc32c::crc32c_append(self.crc, &data[..n]);
                    if let Some(w) = self.out.as_mut() {
                        w.write_all(&data[..n])
                            .map_err(|e| format!("{}: {e}", self.path.display()))?;
                        self.written += n as u64;
                        if self.written - self.written_back >= WRITEBACK_BYTES {
                            w.flush()
                                .map_err(|e| format!("{}: {e}", self.path.display()))?;
                            sluicedb::fs::start_writeback(
                                w.get_ref(),
                                self.written_back,
                                self.written,
                            );
                            self.written_back = self.written;
                        }
                    }
                    self.left -= n as u64;
                    self.offset += n as u64;
                    data = &data[n..];
                    if self.left == 0 {
                        self.expect(Step::Crc, 4);
                    }
                }
                Step::Done => return Err(self.corrupt(self.offset, "bytes after the end")),
                _ => {
                    let n = (self.want - self.small.len()).min(data.len());
                    self.small.extend_from_slice(&data[..n]);
                    self.offset += n as u64;
                    data = &data[n..];
                    if self.small.len() == self.want {
                        let field = std::mem::take(&mut self.small);
                        self.field(&field)?;
                        self.small = field;
                        self.small.clear();
                    }
                }
            }
        }
        Ok(())
    }

    fn expect(&mut self, step: Step, want: usize) {
        self.step = step;
        self.want = want;
    }

    /// A field is whole: check it and go on.
    fn field(&mut self, f: &[u8]) -> Result<(), String> {
        let at = self.offset - f.len() as u64;
        match self.step {
            Step::Magic => {
                if f != MAGIC {
                    return Err(self.corrupt(0, "not a snapshot archive"));
                }
                self.expect(Step::Kind, 1);
            }
            Step::Kind => {
                self.record_at = at;
                match f[0] {
                    END_RECORD => self.expect(Step::Count, 4),
                    FILE_RECORD => self.expect(Step::NameLen, 2),
                    _ => return Err(self.corrupt(at, "unknown record")),
                }
            }
            Step::NameLen => {
                let n = usize::from(u16::from_le_bytes([f[0], f[1]]));
                if n == 0 {
                    return Err(self.corrupt(self.record_at, "a name leaves the directory"));
                }
                self.expect(Step::Name, n);
            }
            Step::Name => {
                let name = String::from_utf8(f.to_vec())
                    .map_err(|_| self.corrupt(self.record_at, "a name is not UTF-8"))?;
                let rel = Path::new(&name);
                if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
                    return Err(self.corrupt(self.record_at, "a name leaves the directory"));
                }
                self.path = self.dir.join(rel);
                self.name = name;
                self.expect(Step::Len, 8);
            }
            Step::Len => {
                let mut l = [0u8; 8];
                l.copy_from_slice(f);
                self.left = u64::from_le_bytes(l);
                if let Some(p) = self.path.parent() {
                    std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
                }
                let out = File::create(&self.path)
                    .map_err(|e| format!("{}: {e}", self.path.display()))?;
                self.out = Some(BufWriter::with_capacity(BUF_BYTES, out));
                self.written = 0;
                self.written_back = 0;
                self.crc = 0;
                self.bytes += self.left;
                if self.left == 0 {
                    self.expect(Step::Crc, 4);
                } else {
                    self.step = Step::Data;
                }
            }
            Step::Crc => {
                if u32::from_le_bytes([f[0], f[1], f[2], f[3]]) != self.crc {
                    return Err(self.corrupt(at, &format!("checksum mismatch in {}", self.name)));
                }
                let out = self
                    .out
                    .take()
                    .ok_or_else(|| self.corrupt(at, "no file open"))?;
                let out = out
                    .into_inner()
                    .map_err(|e| format!("{}: {}", self.path.display(), e.error()))?;
                sluicedb::fs::start_writeback(&out, self.written_back, self.written);
                self.unsynced
                    .push_back((std::mem::take(&mut self.path), out));
                if self.unsynced.len() > UNSYNCED_FILES {
                    self.sync_oldest()?;
                }
                self.files += 1;
                self.expect(Step::Kind, 1);
            }
            Step::Count => {
                if u32::from_le_bytes([f[0], f[1], f[2], f[3]]) != self.files {
                    return Err(self.corrupt(self.record_at, "file count disagrees"));
                }
                self.step = Step::Done;
            }
            Step::Data | Step::Done => {}
        }
        Ok(())
    }

    /// Syncs the file written whole longest ago.
    fn sync_oldest(&mut self) -> Result<(), String> {
        if let Some((path, f)) = self.unsynced.pop_front() {
            let started = Instant::now();
            f.sync_data()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            self.sync += started.elapsed();
        }
        Ok(())
    }

    /// The archive ended: it must have been whole. Syncs every file and
    /// then every directory (once each), and returns what it unpacked.
    pub fn finish(mut self) -> Result<Unpacked, String> {
        if !matches!(self.step, Step::Done) {
            return Err(self.corrupt(self.offset, "truncated (the archive ends early)"));
        }
        while !self.unsynced.is_empty() {
            self.sync_oldest()?;
        }
        let started = Instant::now();
        sync_dirs(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        Ok(Unpacked {
            file_bytes: self.bytes,
            sync: self.sync + started.elapsed(),
        })
    }
}

fn sync_dirs(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            sync_dirs(&e.path())?;
        }
    }
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_round_trips_and_damage_names_the_offset() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("a"), b"hello").unwrap();
        std::fs::write(src.join("sub/b"), vec![7u8; 300_000]).unwrap();
        std::fs::write(src.join("empty"), b"").unwrap();
        let ar = t.path().join("x.snap");
        let len = pack(&src, &ar).unwrap();
        assert_eq!(len, std::fs::metadata(&ar).unwrap().len());
        let dst = t.path().join("dst");
        assert_eq!(unpack(&ar, &dst).unwrap(), 300_005);
        assert_eq!(std::fs::read(dst.join("a")).unwrap(), b"hello");
        assert_eq!(
            std::fs::read(dst.join("sub/b")).unwrap(),
            vec![7u8; 300_000]
        );
        assert!(dst.join("empty").exists());

        // A flipped byte in sub/b's data: after the magic come "a"
        // (1+2+1+8+5+4 bytes), "empty" (1+2+5+8+0+4) and sub/b's header
        // (1+2+5+8).
        let mut raw = std::fs::read(&ar).unwrap();
        raw[8 + 21 + 20 + 16 + 100] ^= 1;
        std::fs::write(&ar, &raw).unwrap();
        let e = unpack(&ar, &t.path().join("dst2")).unwrap_err();
        assert!(e.contains("checksum mismatch in sub/b"), "{e}");
        assert!(e.contains("at offset"), "{e}");

        // Cut short.
        std::fs::write(&ar, &raw[..raw.len() - 3]).unwrap();
        let e = unpack(&ar, &t.path().join("dst3")).unwrap_err();
        assert!(e.contains("truncated") || e.contains("checksum"), "{e}");
    }

    /// Fed in pieces of any size (chunks as they arrive), the archive
    /// unpacks as it does from its file; a piece short, it is truncated.
    #[test]
    fn fed_in_pieces_of_any_size_it_unpacks_the_same() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("a"), b"hello").unwrap();
        std::fs::write(src.join("empty"), b"").unwrap();
        let big: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(src.join("sub/b"), &big).unwrap();
        let ar = t.path().join("x.snap");
        pack(&src, &ar).unwrap();
        let raw = std::fs::read(&ar).unwrap();
        for (i, piece) in [1usize, 3, 8, 4093, 1 << 20].into_iter().enumerate() {
            let dst = t.path().join(format!("dst{i}"));
            let mut u = Unpacker::new(&ar, &dst).unwrap();
            for c in raw.chunks(piece) {
                u.feed(c).unwrap();
            }
            assert_eq!(u.finish().unwrap().file_bytes, 700_005, "pieces of {piece}");
            assert_eq!(std::fs::read(dst.join("a")).unwrap(), b"hello");
            assert_eq!(std::fs::read(dst.join("sub/b")).unwrap(), big);
            assert!(dst.join("empty").exists());
        }
        // Read from any offset (openraft resends a chunk at its offset),
        // the packed directory gives the same bytes as the archive.
        let mut p = Packer::open(&src).unwrap();
        assert_eq!(p.archive_len(), raw.len() as u64);
        for at in [0u64, 5, 9, 30, 80, 300_000, raw.len() as u64 - 7, 100] {
            p.seek(at).unwrap();
            let mut got = vec![0u8; 100_000];
            let n = p.read(&mut got).unwrap();
            let want = &raw[at as usize..(at as usize + 100_000).min(raw.len())];
            assert_eq!(&got[..n], want, "read at {at}");
        }
        let mut u = Unpacker::new(&ar, &t.path().join("short")).unwrap();
        u.feed(&raw[..raw.len() - 1]).unwrap();
        let e = u.finish().unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let mut u = Unpacker::new(&ar, &t.path().join("long")).unwrap();
        u.feed(&raw).unwrap();
        let e = u.feed(b"x").unwrap_err();
        assert!(e.contains(&format!("at offset {}", raw.len())), "{e}");
    }

    /// More files than wait unsynced at once (the oldest are synced as
    /// the others come), and files larger than the writeback step: all
    /// unpack whole, each synced by the end.
    #[test]
    fn many_files_and_large_ones_unpack_whole() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        for i in 0..UNSYNCED_FILES + 40 {
            std::fs::write(src.join(format!("d/f{i:04}")), format!("file {i}")).unwrap();
        }
        let big: Vec<u8> = (0..(WRITEBACK_BYTES * 2 + 12_345))
            .map(|i| (i * 13 % 251) as u8)
            .collect();
        std::fs::write(src.join("big"), &big).unwrap();
        let ar = t.path().join("x.snap");
        pack(&src, &ar).unwrap();
        let dst = t.path().join("dst");
        let mut u = Unpacker::new(&ar, &dst).unwrap();
        for c in std::fs::read(&ar).unwrap().chunks(CHUNK_BYTES as usize) {
            u.feed(c).unwrap();
        }
        // Every file is written, the last ones still unsynced.
        assert_eq!(u.unsynced.len(), UNSYNCED_FILES);
        u.finish().unwrap();
        assert_eq!(std::fs::read(dst.join("big")).unwrap(), big);
        for i in 0..UNSYNCED_FILES + 40 {
            let got = std::fs::read_to_string(dst.join(format!("d/f{i:04}"))).unwrap();
            assert_eq!(got, format!("file {i}"));
        }
    }
}
