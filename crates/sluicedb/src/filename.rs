//! Names of the files in a database directory.
//!
//! | name                | what                                  |
//! |---------------------|---------------------------------------|
//! | `000007.log`        | journal number 7                      |
//! | `000012.sst`        | table number 12                       |
//! | `000013.vlog`       | value log file number 13              |
//! | `000014.vseg`       | hash layout segment group file 14     |
//! | `000015.vst`        | value table 15 (table layout)         |
//! | `000016.hix`        | hash index checkpoint 16 (UniKV)      |
//! | `MANIFEST-000005`   | manifest number 5                     |
//! | `LIGHTKV.pwb`       | lightkv's write buffer region         |
//! | `CURRENT`           | names the live manifest               |
//! | `LOCK`              | held while a `Db` has the directory   |
//! | `*.tmp`             | a file being written, never read      |

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    Journal(u64),
    Table(u64),
    ValueLog(u64),
    ValueSegment(u64),
    ValueTable(u64),
    HashIndex(u64),
    Manifest(u64),
    Current,
    Lock,
    Temp,
}

pub(crate) fn journal(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}
pub(crate) fn table(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.sst"))
}
pub(crate) fn value_log(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.vlog"))
}
pub(crate) fn value_segment(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.vseg"))
}
pub(crate) fn value_table(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.vst"))
}
pub(crate) fn hash_index(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.hix"))
}
pub(crate) fn manifest(dir: &Path, n: u64) -> PathBuf {
    dir.join(manifest_name(n))
}
pub(crate) fn manifest_name(n: u64) -> String {
    format!("MANIFEST-{n:06}")
}
pub(crate) fn current(dir: &Path) -> PathBuf {
    dir.join("CURRENT")
}
pub(crate) fn lock(dir: &Path) -> PathBuf {
    dir.join("LOCK")
}
pub(crate) fn temp(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.tmp"))
}

pub(crate) fn parse(name: &str) -> Option<FileKind> {
    match name {
        "CURRENT" => return Some(FileKind::Current),
        "LOCK" => return Some(FileKind::Lock),
        _ => {}
    }
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return n.parse().ok().map(FileKind::Manifest);
    }
    let (num, ext) = name.split_once('.')?;
    let n: u64 = num.parse().ok()?;
    match ext {
        "log" => Some(FileKind::Journal(n)),
        "sst" => Some(FileKind::Table(n)),
        "vlog" => Some(FileKind::ValueLog(n)),
        "vseg" => Some(FileKind::ValueSegment(n)),
        "vst" => Some(FileKind::ValueTable(n)),
        "hix" => Some(FileKind::HashIndex(n)),
        "tmp" => Some(FileKind::Temp),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let d = Path::new("/db");
        for (p, k) in [
            (journal(d, 7), FileKind::Journal(7)),
            (table(d, 1234567), FileKind::Table(1234567)),
            (value_log(d, 3), FileKind::ValueLog(3)),
            (value_segment(d, 4), FileKind::ValueSegment(4)),
            (value_table(d, 5), FileKind::ValueTable(5)),
            (hash_index(d, 6), FileKind::HashIndex(6)),
            (manifest(d, 5), FileKind::Manifest(5)),
            (current(d), FileKind::Current),
        ] {
            let name = p.file_name().unwrap().to_str().unwrap();
            assert_eq!(parse(name), Some(k));
        }
        assert_eq!(parse("junk"), None);
        assert_eq!(parse("x.sst"), None);
    }
}
