//! Installing a snapshot by swapping directories: the unpacked checkpoint
//! becomes the node's database, whole, instead of having its records
//! copied in. The protocol (`docs/design.md`, "Snapshots"):
//!
//! 1. The snapshot is unpacked into `raft/install` (synced); its own Raft
//!    records but the applied record `ra` are deleted, and this node's
//!    (log, vote, committed id, purge point) are copied in from the live
//!    database once nothing else writes it; synced.
//! 2. **Commit point**: the mark `raft/swap` is written and synced (its
//!    directory too).
//! 3. `db` is renamed to `db.old`, `raft/install` to `db` (directories
//!    synced); the mark is removed, then `db.old`.
//!
//! At start, before the database is opened, [`recover`] finishes a swap
//! whose mark it finds (step 3 is redo-able: each rename is done only if
//! its source is still there), and otherwise throws away an unfinished
//! `raft/install`. A crash thus leaves the old database or the new one,
//! never a mix.
//!
//! Assumed of the file system: a rename is atomic, and is durable once
//! the directory holding it is synced; a synced file's contents are.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The files a swap moves, under a node's `--dir`.
struct Paths {
    dir: PathBuf,
    raft: PathBuf,
    db: PathBuf,
    old: PathBuf,
    install: PathBuf,
    staging: PathBuf,
    mark: PathBuf,
}

impl Paths {
    fn of(dir: &Path) -> Paths {
        let raft = super::raft_dir(dir);
        Paths {
            dir: dir.to_path_buf(),
            db: super::db_dir(dir),
            old: dir.join("db.old"),
            install: raft.join("install"),
            staging: raft.join("install.tmp"),
            mark: raft.join("swap"),
            raft,
        }
    }
}

/// Where a snapshot is unpacked to before the swap.
pub fn install_dir(dir: &Path) -> PathBuf {
    Paths::of(dir).install
}

/// Where a snapshot is unpacked while it is incomplete.
pub fn staging_dir(dir: &Path) -> PathBuf {
    Paths::of(dir).staging
}

fn ctx(p: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", p.display())
}

fn sync_dir(p: &Path) -> Result<(), String> {
    File::open(p).and_then(|f| f.sync_all()).map_err(ctx(p))
}

fn remove_tree(p: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

/// Steps of [`commit`], numbered for crash tests: a test stops after step
/// `n` as a crash would, and checks what [`recover`] makes of it.
#[derive(Clone, Copy)]
pub struct CrashAt(pub Option<u32>);

impl CrashAt {
    fn reached(self, step: u32) -> bool {
        self.0 == Some(step)
    }
}

/// Swaps `raft/install` (complete and synced) in as the database of the
/// node in `dir`; the database must be closed. Returns whether it ran to
/// its end (false only when `crash` stopped it).
pub fn commit(dir: &Path, crash: CrashAt) -> Result<bool, String> {
    let p = Paths::of(dir);
    // A leftover of an earlier swap: `db.old` must be free for step 3.
    remove_tree(&p.old)?;
    let tmp = p.raft.join("swap.tmp");
    let mut f = File::create(&tmp).map_err(ctx(&tmp))?;
    f.write_all(b"swap raft/install in as db\n")
        .and_then(|()| f.sync_all())
        .map_err(ctx(&tmp))?;
    if crash.reached(1) {
        return Ok(false);
    }
    std::fs::rename(&tmp, &p.mark).map_err(ctx(&p.mark))?;
    sync_dir(&p.raft)?;
    if crash.reached(2) {
        return Ok(false);
    }
    finish(&p, crash)
}

/// Step 3, redo-able.
fn finish(p: &Paths, crash: CrashAt) -> Result<bool, String> {
    if p.install.exists() {
        if p.db.exists() {
            std::fs::rename(&p.db, &p.old).map_err(ctx(&p.db))?;
            sync_dir(&p.dir)?;
        }
        if crash.reached(3) {
            return Ok(false);
        }
        std::fs::rename(&p.install, &p.db).map_err(ctx(&p.install))?;
        sync_dir(&p.raft)?;
        sync_dir(&p.dir)?;
    }
    if crash.reached(4) {
        return Ok(false);
    }
    std::fs::remove_file(&p.mark).map_err(ctx(&p.mark))?;
    sync_dir(&p.raft)?;
    if crash.reached(5) {
        return Ok(false);
    }
    remove_tree(&p.old)?;
    Ok(true)
}

/// Run at start before the database of the node in `dir` is opened:
/// finishes a committed swap, or drops an uncommitted one's files.
pub fn recover(dir: &Path) -> Result<(), String> {
    let p = Paths::of(dir);
    if !p.raft.exists() {
        return Ok(());
    }
    if p.mark.exists() {
        finish(&p, CrashAt(None))?;
        return Ok(());
    }
    for d in [&p.staging, &p.install, &p.old] {
        remove_tree(d)?;
    }
    let tmp = p.raft.join("swap.tmp");
    if tmp.exists() {
        std::fs::remove_file(&tmp).map_err(ctx(&tmp))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicedb::{Db, Options};

    fn make_db(path: &Path, tag: &str, n: usize) {
        let db = Db::open(path, Options::default()).unwrap();
        for i in 0..n {
            db.put(format!("k{i:04}"), format!("{tag}{i}")).unwrap();
        }
        db.flush().unwrap();
        db.put("tail", tag).unwrap();
    }

    /// Which database `dir/db` is: "old" or "new", checked whole.
    fn which(dir: &Path) -> String {
        let db = Db::open(super::super::db_dir(dir), Options::default()).unwrap();
        let tag = String::from_utf8(db.get("tail").unwrap().unwrap()).unwrap();
        let n = if tag == "old" { 300 } else { 200 };
        let pairs: Vec<_> = db.range::<Vec<u8>>(..).map(|p| p.unwrap()).collect();
        assert_eq!(pairs.len(), n + 1, "{tag}: a mix of two databases");
        for (i, (k, v)) in pairs.iter().take(n).enumerate() {
            assert_eq!(k, format!("k{i:04}").as_bytes());
            assert_eq!(v, format!("{tag}{i}").as_bytes(), "{tag}: a mix");
        }
        tag
    }

    /// A crash after every step of the swap, then the start's recovery:
    /// the node opens the old database (before the commit point) or the
    /// new one (after it), whole, and a swap after that works again.
    #[test]
    fn a_crash_at_any_step_of_a_swap_leaves_the_old_database_or_the_new() {
        for step in 0..=6u32 {
            let t = tempfile::tempdir().unwrap();
            let dir = t.path();
            std::fs::create_dir_all(super::super::raft_dir(dir)).unwrap();
            make_db(&super::super::db_dir(dir), "old", 300);
            make_db(&install_dir(dir), "new", 200);
            let done = commit(dir, CrashAt(Some(step))).unwrap();
            assert_eq!(done, step == 0 || step == 6, "step {step}");
            recover(dir).unwrap();
            let want = if step == 1 { "old" } else { "new" };
            assert_eq!(which(dir), want, "a crash after step {step}");
            for leftover in ["db.old", "raft/install", "raft/swap", "raft/swap.tmp"] {
                assert!(!dir.join(leftover).exists(), "step {step}: {leftover}");
            }
            // An unfinished unpack is dropped at start; the next swap runs.
            make_db(&install_dir(dir), "old", 300);
            std::fs::create_dir_all(staging_dir(dir)).unwrap();
            recover(dir).unwrap();
            assert!(!install_dir(dir).exists() && !staging_dir(dir).exists());
            make_db(&install_dir(dir), "old", 300);
            assert!(commit(dir, CrashAt(None)).unwrap());
            assert_eq!(which(dir), "old", "swapping back after step {step}");
        }
    }
}
