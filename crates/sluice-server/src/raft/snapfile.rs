//! A snapshot archive: the files of a checkpoint, one after another, each
//! with its name, length and checksum (`docs/format/raft-snapshot.md`).
//! Packing and unpacking stream file by file through a fixed buffer, and
//! openraft sends the archive in chunks of [`CHUNK_BYTES`]: no snapshot
//! is ever one blob in memory.
//!
//! ```text
//! "SLSNAP01"
//! per file:  0x01 | name_len u16 LE | name | len u64 LE | bytes | crc32c u32 LE
//! end:       0x00 | files u32 LE
//! ```

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Component, Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"SLSNAP01";
const FILE_RECORD: u8 = 1;
const END_RECORD: u8 = 0;
/// Bytes per install-snapshot message.
pub const CHUNK_BYTES: u64 = 1 << 20;
const BUF_BYTES: usize = 256 << 10;

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
    let mut files = Vec::new();
    walk(dir, Path::new(""), &mut files)?;
    let f = File::create(archive)?;
    let mut w = BufWriter::with_capacity(BUF_BYTES, f);
    w.write_all(MAGIC)?;
    let mut total = MAGIC.len() as u64;
    let mut buf = vec![0u8; BUF_BYTES];
    for rel in &files {
        let name = rel
            .to_str()
            .ok_or_else(|| std::io::Error::other(format!("{}: not UTF-8", rel.display())))?;
        let name_len = u16::try_from(name.len())
            .map_err(|_| std::io::Error::other(format!("{name}: name too long")))?;
        let mut src = File::open(dir.join(rel))?;
        let len = src.metadata()?.len();
        w.write_all(&[FILE_RECORD])?;
        w.write_all(&name_len.to_le_bytes())?;
        w.write_all(name.as_bytes())?;
        w.write_all(&len.to_le_bytes())?;
        let mut crc = 0u32;
        let mut left = len;
        while left > 0 {
            let n = (left.min(BUF_BYTES as u64)) as usize;
            src.read_exact(&mut buf[..n])?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            w.write_all(&buf[..n])?;
            left -= n as u64;
        }
        w.write_all(&crc.to_le_bytes())?;
        total += 1 + 2 + u64::from(name_len) + 8 + len + 4;
    }
    w.write_all(&[END_RECORD])?;
    w.write_all(&(files.len() as u32).to_le_bytes())?;
    total += 5;
    let f = w.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    Ok(total)
}

/// Tracks the offset read so that damage is reported where it is.
struct Counted<R> {
    inner: R,
    offset: u64,
}

impl<R: Read> Counted<R> {
    fn exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_exact(buf)?;
        self.offset += buf.len() as u64;
        Ok(())
    }
}

/// Unpacks `archive` into `dir` (created; it must not exist), checking
/// every file's checksum and syncing what it writes. Damage is an error
/// naming the archive and the offset.
pub fn unpack(archive: &Path, dir: &Path) -> Result<u64, String> {
    let corrupt = |off: u64, why: &str| format!("{}: {why} at offset {off}", archive.display());
    let f = File::open(archive).map_err(|e| format!("{}: {e}", archive.display()))?;
    let mut r = Counted {
        inner: BufReader::with_capacity(BUF_BYTES, f),
        offset: 0,
    };
    let io = |r: &Counted<_>, e: std::io::Error| corrupt(r.offset, &format!("truncated ({e})"));
    let mut magic = [0u8; 8];
    r.exact(&mut magic).map_err(|e| io(&r, e))?;
    if &magic != MAGIC {
        return Err(corrupt(0, "not a snapshot archive"));
    }
    std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = 0u32;
    let mut bytes = 0u64;
    let mut buf = vec![0u8; BUF_BYTES];
    loop {
        let at = r.offset;
        let mut kind = [0u8; 1];
        r.exact(&mut kind).map_err(|e| io(&r, e))?;
        match kind[0] {
            END_RECORD => {
                let mut n = [0u8; 4];
                r.exact(&mut n).map_err(|e| io(&r, e))?;
                if u32::from_le_bytes(n) != files {
                    return Err(corrupt(at, "file count disagrees"));
                }
                break;
            }
            FILE_RECORD => {}
            _ => return Err(corrupt(at, "unknown record")),
        }
        let mut nl = [0u8; 2];
        r.exact(&mut nl).map_err(|e| io(&r, e))?;
        let mut name = vec![0u8; usize::from(u16::from_le_bytes(nl))];
        r.exact(&mut name).map_err(|e| io(&r, e))?;
        let name = String::from_utf8(name).map_err(|_| corrupt(at, "a name is not UTF-8"))?;
        let rel = Path::new(&name);
        if name.is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(corrupt(at, "a name leaves the directory"));
        }
        let mut ll = [0u8; 8];
        r.exact(&mut ll).map_err(|e| io(&r, e))?;
        let len = u64::from_le_bytes(ll);
        let path = dir.join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        let out = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut w = BufWriter::with_capacity(BUF_BYTES, out);
        let mut crc = 0u32;
        let mut left = len;
        while left > 0 {
            let n = (left.min(BUF_BYTES as u64)) as usize;
            r.exact(&mut buf[..n]).map_err(|e| io(&r, e))?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            w.write_all(&buf[..n])
                .map_err(|e| format!("{}: {e}", path.display()))?;
            left -= n as u64;
        }
        let mut c = [0u8; 4];
        let crc_at = r.offset;
        r.exact(&mut c).map_err(|e| io(&r, e))?;
        if u32::from_le_bytes(c) != crc {
            return Err(corrupt(crc_at, &format!("checksum mismatch in {name}")));
        }
        let out = w
            .into_inner()
            .map_err(|e| format!("{}: {}", path.display(), e.error()))?;
        out.sync_all()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        files += 1;
        bytes += len;
    }
    sync_dirs(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(bytes)
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
}
