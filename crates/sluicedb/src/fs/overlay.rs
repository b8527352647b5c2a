//! [`OverlayFs`]: a read-only view of a file system for read-only opens
//! ([`crate::Options::read_only`]).
//!
//! Reads go to the real file system; everything an open would write — a
//! new journal, a value store head, L0 tables of replayed journals, a
//! fresh manifest, deletions of obsolete files — lands in memory and is
//! gone when the database closes. So a read-only open runs the very code of
//! a normal open (recovery included) and leaves the directory byte for byte
//! as it found it.
//!
//! Rules: a path written, renamed over or removed through the overlay is
//! *shadowed*: the real file of that name is never read again, and what the
//! overlay holds (if anything) answers instead.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{FileLock, Fs, MemFs, RandomAccessFile, WritableFile};
use crate::error::{Error, Result};
use crate::pm::Pm;

pub(crate) struct OverlayFs {
    lower: Arc<dyn Fs>,
    upper: MemFs,
    /// Paths whose file in `lower` is hidden (removed, or replaced by one
    /// in `upper`).
    shadowed: Mutex<HashSet<PathBuf>>,
}

impl OverlayFs {
    pub(crate) fn new(lower: Arc<dyn Fs>) -> Self {
        OverlayFs {
            lower,
            upper: MemFs::new(),
            shadowed: Mutex::new(HashSet::new()),
        }
    }

    fn in_lower(&self, path: &Path) -> bool {
        !self.shadowed.lock().contains(path) && self.lower.exists(path)
    }

    /// The layer that answers for `path`, `None` for a shadowed one.
    fn layer(&self, path: &Path, op: &'static str) -> Result<&dyn Fs> {
        if self.upper.exists(path) {
            Ok(&self.upper)
        } else if self.shadowed.lock().contains(path) {
            Err(not_found(op, path))
        } else {
            Ok(self.lower.as_ref())
        }
    }
}

fn not_found(op: &'static str, path: &Path) -> Error {
    Error::io(
        op,
        path,
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
    )
}

impl Fs for OverlayFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        if let Some(dir) = path.parent() {
            self.upper.create_dir_all(dir)?;
        }
        self.shadowed.lock().insert(path.to_path_buf());
        self.upper.create(path)
    }

    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        self.layer(path, "open")?.open(path)
    }

    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        self.layer(path, "read")?.read_all(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if !self.upper.exists(from) {
            // A real file renamed: its bytes move into memory.
            if !self.in_lower(from) {
                return Err(not_found("rename", from));
            }
            let data = self.lower.read_all(from)?;
            let mut f = self.create(from)?;
            f.append(&data)?;
        }
        self.upper.rename(from, to)?;
        let mut shadowed = self.shadowed.lock();
        shadowed.insert(from.to_path_buf());
        shadowed.insert(to.to_path_buf());
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        if self.upper.exists(path) {
            return self.upper.remove(path);
        }
        if !self.in_lower(path) {
            return Err(not_found("remove", path));
        }
        self.shadowed.lock().insert(path.to_path_buf());
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        self.upper.exists(path) || self.in_lower(path)
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .lower
            .list(dir)?
            .into_iter()
            .filter(|n| !self.shadowed.lock().contains(&dir.join(n)))
            .collect();
        if self.upper.exists(dir) {
            names.extend(self.upper.list(dir)?);
        }
        names.sort_unstable();
        names.dedup();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        if self.lower.exists(dir) {
            return Ok(());
        }
        self.upper.create_dir_all(dir)
    }

    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    /// Nothing of a read-only open reaches the disk.
    fn sync_file(&self, _path: &Path) -> Result<()> {
        Ok(())
    }

    /// The real lock when the database has a lock file (a writer elsewhere
    /// makes a read-only open fail with `Locked` rather than read files
    /// being changed under it); otherwise one in memory, since taking the
    /// real one would create the file.
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        if self.in_lower(path) {
            self.lower.lock(path)
        } else {
            self.upper.lock(path)
        }
    }

    fn allocated_len(&self, path: &Path) -> Result<u64> {
        self.layer(path, "stat")?.allocated_len(path)
    }

    /// Only a directory the overlay made: real ones stay.
    fn remove_dir(&self, dir: &Path) -> Result<()> {
        self.upper.remove_dir(dir)
    }

    /// A region of the real file system is copied into memory the first
    /// time it is opened: recovery reads it and whatever it writes stays
    /// in the copy.
    fn open_pm(&self, path: &Path, len_bytes: u64) -> Result<Arc<dyn Pm>> {
        if !self.upper.exists(path) && self.in_lower(path) {
            let real = self.lower.open_pm(path, len_bytes)?;
            let mut data = vec![0; real.len() as usize];
            real.read(0, &mut data)?;
            if let Some(dir) = path.parent() {
                self.upper.create_dir_all(dir)?;
            }
            let copy = self.upper.open_pm(path, len_bytes)?;
            copy.write(0, &data)?;
            copy.persist(0, real.len())?;
            self.shadowed.lock().insert(path.to_path_buf());
            return Ok(copy);
        }
        if let Some(dir) = path.parent() {
            self.upper.create_dir_all(dir)?;
        }
        self.shadowed.lock().insert(path.to_path_buf());
        self.upper.open_pm(path, len_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// Every change stays in memory: the lower file system's files and
    /// names are untouched, while the overlay shows the changes.
    #[test]
    fn changes_stay_in_memory() {
        let lower = MemFs::new();
        lower.create_dir_all(&p("/d")).unwrap();
        for (name, data) in [("a", b"aaa".as_slice()), ("b", b"bb"), ("c", b"c")] {
            let mut f = lower.create(&p("/d").join(name)).unwrap();
            f.append(data).unwrap();
        }
        let files = |fs: &MemFs| {
            let mut v: Vec<_> = fs
                .paths()
                .into_iter()
                .map(|q| (q.clone(), fs.contents(&q)))
                .collect();
            v.sort();
            v
        };
        let before = files(&lower);
        let o = OverlayFs::new(Arc::new(lower.clone()));
        o.create(&p("/d/new")).unwrap().append(b"n").unwrap();
        o.create(&p("/d/a")).unwrap().append(b"A").unwrap();
        o.rename(&p("/d/b"), &p("/d/c")).unwrap();
        o.remove(&p("/d/new")).unwrap();
        assert_eq!(o.read_all(&p("/d/a")).unwrap(), b"A");
        assert_eq!(o.read_all(&p("/d/c")).unwrap(), b"bb");
        assert!(!o.exists(&p("/d/b")) && !o.exists(&p("/d/new")));
        assert!(o.open(&p("/d/b")).is_err() && o.remove(&p("/d/b")).is_err());
        assert_eq!(o.list(&p("/d")).unwrap(), ["a", "c"]);
        o.remove(&p("/d/c")).unwrap();
        assert_eq!(o.list(&p("/d")).unwrap(), ["a"]);
        assert_eq!(before, files(&lower));
    }

    #[test]
    fn persistent_memory_is_copied_not_changed() {
        let lower = MemFs::new();
        lower.create_dir_all(&p("/d")).unwrap();
        let real = lower.open_pm(&p("/d/pm"), 64).unwrap();
        real.write_u64(0, 7).unwrap();
        real.persist(0, 8).unwrap();
        let o = OverlayFs::new(Arc::new(lower.clone()));
        let copy = o.open_pm(&p("/d/pm"), 64).unwrap();
        assert_eq!(copy.read_u64(0).unwrap(), 7);
        copy.write_u64(0, 8).unwrap();
        assert_eq!(o.open_pm(&p("/d/pm"), 64).unwrap().read_u64(0).unwrap(), 8);
        assert_eq!(real.read_u64(0).unwrap(), 7);
        assert!(!o.exists(&p("/d/other")));
        o.open_pm(&p("/d/other"), 64).unwrap();
        assert!(!lower.exists(&p("/d/other")));
    }
}
