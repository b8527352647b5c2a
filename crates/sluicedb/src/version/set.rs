//! The manifest: recovery of the current version and durable installation of
//! edits.
//!
//! Protocol (`docs/design.md`, "Manifest"): an edit is appended to the live
//! manifest and synced before the new version is used. When the manifest
//! grows past `max_manifest_bytes` (and at every open), a new manifest is
//! written with a snapshot of the version, synced, its name made durable by a
//! directory sync, and then `CURRENT` is switched to it through a synced
//! temporary file, a rename and another directory sync.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::edit::{format_version_of, VersionEdit, MANIFEST_FORMAT_VERSION};
use super::version::{LevelRules, Version};
use crate::coding::masked_crc;
use crate::error::{Error, Result};
use crate::filename;
use crate::fs::{CountingFs, IoClass};
use crate::logfile::{read_log, LogWriter};

/// The live manifest file; guarded by the database's manifest lock, which
/// also serialises every version installation.
pub(crate) struct ManifestState {
    writer: LogWriter,
    pub(crate) number: u64,
}

/// The first record of a new manifest: a version and the numbers recovery
/// starts from.
pub(crate) struct ManifestHead<'a> {
    pub(crate) version: &'a Version,
    pub(crate) log_number: u64,
    pub(crate) last_sequence: u64,
    /// Above every file the manifest names (and its own number).
    pub(crate) next_file_number: u64,
}

/// What recovery found in the manifest.
pub(crate) struct Recovered {
    pub(crate) version: Version,
    pub(crate) log_number: u64,
    pub(crate) next_file_number: u64,
    pub(crate) last_sequence: u64,
    pub(crate) manifest_number: u64,
}

/// File numbering and manifest I/O.
pub(crate) struct VersionSet {
    dir: PathBuf,
    fs: CountingFs,
    shape: Arc<dyn LevelRules>,
    next_file_number: Arc<AtomicU64>,
    max_manifest_bytes: u64,
}

/// Encodes `CURRENT`: the manifest name and a checksum of it.
fn current_contents(manifest_number: u64) -> Vec<u8> {
    let name = filename::manifest_name(manifest_number);
    format!("{name}\ncrc32c:{:08x}\n", masked_crc(name.as_bytes())).into_bytes()
}

fn parse_current(data: &[u8], path: &Path) -> Result<u64> {
    let bad = |why: &str| Error::corruption(path, 0, format!("CURRENT: {why}"));
    let text = std::str::from_utf8(data).map_err(|_| bad("not text"))?;
    let mut lines = text.split('\n');
    let name = lines.next().unwrap_or_default();
    let crc_line = lines.next().ok_or_else(|| bad("missing checksum line"))?;
    if lines.next() != Some("") || lines.next().is_some() {
        return Err(bad("unexpected content"));
    }
    let hex = crc_line
        .strip_prefix("crc32c:")
        .ok_or_else(|| bad("malformed checksum line"))?;
    // Compared as text so that every bit of the line is checked.
    if hex != format!("{:08x}", masked_crc(name.as_bytes())) {
        return Err(bad("checksum mismatch"));
    }
    match filename::parse(name) {
        Some(filename::FileKind::Manifest(n)) => Ok(n),
        _ => Err(bad("does not name a manifest")),
    }
}

impl VersionSet {
    pub(crate) fn new(
        dir: PathBuf,
        fs: CountingFs,
        shape: Arc<dyn LevelRules>,
        next_file_number: u64,
        max_manifest_bytes: u64,
    ) -> Self {
        VersionSet {
            dir,
            fs,
            shape,
            next_file_number: Arc::new(AtomicU64::new(next_file_number)),
            max_manifest_bytes,
        }
    }

    pub(crate) fn new_file_number(&self) -> u64 {
        self.next_file_number.fetch_add(1, Ordering::SeqCst)
    }

    /// The shared counter, for other file allocators (the value log).
    pub(crate) fn file_numbers(&self) -> Arc<AtomicU64> {
        self.next_file_number.clone()
    }

    pub(crate) fn next_file_number(&self) -> u64 {
        self.next_file_number.load(Ordering::SeqCst)
    }

    /// True if `CURRENT` exists in `dir`.
    pub(crate) fn exists(fs: &CountingFs, dir: &Path) -> bool {
        fs.exists(&filename::current(dir))
    }

    /// Reads `CURRENT` and replays its manifest.
    pub(crate) fn recover(
        fs: &CountingFs,
        dir: &Path,
        shape: Arc<dyn LevelRules>,
    ) -> Result<Recovered> {
        let current = filename::current(dir);
        let manifest_number = parse_current(&fs.read_all(&current, IoClass::Manifest)?, &current)?;
        let path = filename::manifest(dir, manifest_number);
        if !fs.exists(&path) {
            return Err(Error::corruption(
                &current,
                0,
                format!("CURRENT names {}, which does not exist", path.display()),
            ));
        }
        let data = fs.read_all(&path, IoClass::Manifest)?;
        let log = read_log(&data);
        if let Some((offset, why)) = log.damage.first() {
            return Err(Error::corruption(&path, *offset, why.clone()));
        }
        if let (Some(offset), Some(why)) = (log.torn_tail_at, &log.torn_tail_damage) {
            return Err(Error::corruption(&path, offset, why.clone()));
        }
        let mut version = Version::empty(shape.clone());
        let (mut log_number, mut next_file, mut last_seq) = (None, None, None);
        for (i, (offset, rec)) in log.records.iter().enumerate() {
            if i == 0 {
                // The version first: a newer manifest's fields are not
                // this build's to judge.
                match format_version_of(rec) {
                    Some(v) if v <= MANIFEST_FORMAT_VERSION && v > 0 => {}
                    Some(v) => {
                        return Err(Error::UnsupportedVersion {
                            file: path,
                            version: v,
                        })
                    }
                    None => {
                        return Err(Error::corruption(
                            &path,
                            *offset,
                            "first manifest record lacks the format version",
                        ))
                    }
                }
            }
            let edit =
                VersionEdit::decode(rec).map_err(|e| Error::corruption(&path, *offset, e))?;
            if i == 0 {
                if let Some(s) = &edit.index_shape {
                    if s != shape.name() {
                        return Err(Error::InvalidArgument(format!(
                            "database was created with index shape {s}, options ask for {}",
                            shape.name()
                        )));
                    }
                }
            }
            version = version
                .apply(&edit)
                .map_err(|e| Error::corruption(&path, *offset, e))?;
            log_number = edit.log_number.or(log_number);
            next_file = edit.next_file_number.or(next_file);
            last_seq = edit.last_sequence.or(last_seq);
            if last_seq.is_some_and(|s| s > crate::key::MAX_SEQUENCE) {
                // Sequences are 56-bit: a larger one cannot be packed in a
                // key (fuzzing found reads panicking on one).
                return Err(Error::corruption(
                    &path,
                    *offset,
                    "manifest's last sequence is past the largest sequence number",
                ));
            }
        }
        let missing = |what: &str| {
            Error::corruption(&path, data.len() as u64, format!("manifest has no {what}"))
        };
        Ok(Recovered {
            version,
            log_number: log_number.ok_or_else(|| missing("journal number"))?,
            next_file_number: next_file.ok_or_else(|| missing("next file number"))?,
            last_sequence: last_seq.ok_or_else(|| missing("last sequence"))?,
            manifest_number,
        })
    }

    /// Writes a new manifest holding `version` and switches `CURRENT` to it.
    pub(crate) fn write_new_manifest(
        &self,
        version: &Version,
        log_number: u64,
        last_sequence: u64,
    ) -> Result<ManifestState> {
        let number = self.new_file_number();
        let head = ManifestHead {
            version,
            log_number,
            last_sequence,
            next_file_number: self.next_file_number(),
        };
        let writer = self.write_manifest(&self.dir, number, &head)?;
        Ok(ManifestState { writer, number })
    }

    /// Writes `dir`'s manifest `number` holding `head` alone, synced and
    /// its name made durable, then `CURRENT` naming it (through a synced
    /// temporary file numbered from this set, a rename and a directory
    /// sync). `dir` is the database's own, or a checkpoint's
    /// (`docs/design.md`, "Checkpoints").
    pub(crate) fn write_manifest(
        &self,
        dir: &Path,
        number: u64,
        head: &ManifestHead<'_>,
    ) -> Result<LogWriter> {
        let path = filename::manifest(dir, number);
        let mut writer = LogWriter::new(self.fs.create(&path, IoClass::Manifest)?);
        let mut edit = head.version.snapshot_edit();
        edit.format_version = Some(MANIFEST_FORMAT_VERSION);
        edit.index_shape = Some(self.shape.name().to_string());
        edit.log_number = Some(head.log_number);
        edit.last_sequence = Some(head.last_sequence);
        edit.next_file_number = Some(head.next_file_number);
        writer.add_record(&edit.encode())?;
        writer.sync()?;
        self.fs.sync_dir(dir)?;
        self.set_current(dir, number)?;
        Ok(writer)
    }

    fn set_current(&self, dir: &Path, manifest_number: u64) -> Result<()> {
        let tmp = filename::temp(dir, self.new_file_number());
        let mut f = self.fs.create(&tmp, IoClass::Manifest)?;
        f.append(&current_contents(manifest_number))?;
        f.sync()?;
        drop(f);
        self.fs.rename(&tmp, &filename::current(dir))?;
        self.fs.sync_dir(dir)
    }

    /// Makes `edit` durable. `new_version` is the version it produces, used
    /// instead when the manifest is rolled. Any error here means the state of
    /// the manifest is unknown: callers poison the database.
    pub(crate) fn log_edit(
        &self,
        ms: &mut ManifestState,
        edit: &mut VersionEdit,
        new_version: &Version,
        log_number: u64,
        last_sequence: u64,
    ) -> Result<()> {
        edit.next_file_number = Some(self.next_file_number());
        edit.last_sequence = Some(last_sequence);
        edit.log_number = Some(log_number);
        if ms.writer.len() >= self.max_manifest_bytes {
            *ms = self.write_new_manifest(new_version, log_number, last_sequence)?;
            return Ok(());
        }
        ms.writer.add_record(&edit.encode())?;
        ms.writer.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a manifest whose only record is `record`, named by CURRENT.
    fn manifest_holding(record: &[u8]) -> (CountingFs, Arc<dyn LevelRules>) {
        let mem = crate::fs::MemFs::new();
        let fs = CountingFs::new(Arc::new(mem));
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let shape = crate::index::shape_for(&crate::Options::default());
        let vs = VersionSet::new(dir.into(), fs.clone(), shape.clone(), 2, 1 << 20);
        let mut w = LogWriter::new(
            fs.create(&filename::manifest(dir, 1), IoClass::Manifest)
                .unwrap(),
        );
        w.add_record(record).unwrap();
        w.sync().unwrap();
        vs.set_current(dir, 1).unwrap();
        (fs, shape)
    }

    fn first_record(format_version: u32) -> Vec<u8> {
        let edit = VersionEdit {
            format_version: Some(format_version),
            log_number: Some(0),
            next_file_number: Some(2),
            last_sequence: Some(0),
            ..VersionEdit::default()
        };
        edit.encode()
    }

    /// A manifest from a newer format, holding a field this build does not
    /// know, is an unsupported version, not damage (issue 51: tags 16 to 31
    /// came without a version bump, and an older build called the manifests
    /// holding them corrupt).
    #[test]
    fn a_newer_manifest_is_unsupported_not_corrupt() {
        let mut record = first_record(MANIFEST_FORMAT_VERSION + 1);
        crate::coding::put_u32(&mut record, 9_999);
        crate::coding::put_bytes(&mut record, b"a field from the future");
        let (fs, shape) = manifest_holding(&record);
        match VersionSet::recover(&fs, Path::new("/db"), shape) {
            Err(Error::UnsupportedVersion { version, .. }) => {
                assert_eq!(version, MANIFEST_FORMAT_VERSION + 1)
            }
            Err(e) => panic!("expected an unsupported version, got {e}"),
            Ok(_) => panic!("expected an unsupported version, got a recovered manifest"),
        }
        // The same unknown field under this build's version is damage.
        let mut record = first_record(MANIFEST_FORMAT_VERSION);
        crate::coding::put_u32(&mut record, 9_999);
        crate::coding::put_bytes(&mut record, b"a field from the future");
        let (fs, shape) = manifest_holding(&record);
        let err = VersionSet::recover(&fs, Path::new("/db"), shape)
            .err()
            .unwrap();
        assert!(err.is_corruption(), "{err}");
        assert!(err.to_string().contains("unknown field tag 9999"), "{err}");
    }

    /// Every version up to this build's opens: version 1 manifests are
    /// still read.
    #[test]
    fn older_manifest_versions_still_open() {
        for v in 1..=MANIFEST_FORMAT_VERSION {
            let (fs, shape) = manifest_holding(&first_record(v));
            let r = VersionSet::recover(&fs, Path::new("/db"), shape).unwrap();
            assert_eq!(
                (r.next_file_number, r.manifest_number),
                (2, 1),
                "version {v}"
            );
        }
        let (fs, shape) = manifest_holding(&first_record(0));
        assert!(matches!(
            VersionSet::recover(&fs, Path::new("/db"), shape),
            Err(Error::UnsupportedVersion { version: 0, .. })
        ));
    }

    #[test]
    fn current_round_trip_and_damage() {
        let p = Path::new("CURRENT");
        let c = current_contents(42);
        assert_eq!(parse_current(&c, p).unwrap(), 42);
        for i in 0..c.len() {
            for bit in 0..8 {
                let mut d = c.clone();
                d[i] ^= 1 << bit;
                assert!(parse_current(&d, p).unwrap_err().is_corruption());
            }
        }
    }
}
