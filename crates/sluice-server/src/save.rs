//! `SAVE`, `BGSAVE` and `LASTSAVE`. With `checkpoint-dir` set, a save is
//! a checkpoint of the database (`Db::checkpoint`, `docs/design.md`,
//! "Checkpoints") named `save-<unix milliseconds>` in that directory; once
//! it is whole, older saves there are removed, so the newest whole save is
//! always the one with the largest number (a crash during a save leaves
//! the previous one, and a staging directory the next save removes).
//! Without it, a save flushes the memtable and syncs the journal.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use sluicedb::{Db, CHECKPOINT_STAGING_SUFFIX};

use crate::store::now_ms;

/// The saves of one server.
pub struct Saves {
    dir: Option<PathBuf>,
    /// A save is running (`SAVE` or `BGSAVE`): another is refused.
    running: Arc<AtomicBool>,
    /// When the last save succeeded, in Unix seconds (`LASTSAVE`).
    pub last_unix: Arc<AtomicU64>,
    /// The last save failed (`rdb_last_bgsave_status:err`).
    pub last_failed: Arc<AtomicBool>,
}

/// The reply to a save asked for while another runs (redis-server's).
pub const IN_PROGRESS: &str = "ERR Background save already in progress";

impl Saves {
    pub fn new(dir: Option<PathBuf>) -> Saves {
        Saves {
            dir,
            running: Arc::new(AtomicBool::new(false)),
            last_unix: Arc::new(AtomicU64::new(now_ms() / 1000)),
            last_failed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// True while a save runs.
    pub fn in_progress(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// `SAVE`: saves now and returns when done.
    pub fn save(&self, db: &Db) -> Result<(), String> {
        self.claim()?;
        let r = save_once(db, self.dir.as_deref());
        self.finish(&r);
        r
    }

    /// `BGSAVE`: starts a save on its own thread.
    /// The thread holds `db` (a replicated shard's snapshot install waits
    /// for it before it replaces the database).
    pub fn bgsave(&self, db: &Arc<Db>) -> Result<(), String> {
        self.claim()?;
        let (db, dir) = (db.clone(), self.dir.clone());
        let done = Saves {
            dir: None,
            running: self.running.clone(),
            last_unix: self.last_unix.clone(),
            last_failed: self.last_failed.clone(),
        };
        std::thread::Builder::new()
            .name("sluice-bgsave".into())
            .spawn(move || {
                let r = save_once(&db, dir.as_deref());
                if let Err(e) = &r {
                    eprintln!("sluice serve: BGSAVE failed: {e}");
                }
                done.finish(&r);
            })
            .map(|_| ())
            .map_err(|e| {
                self.running.store(false, Ordering::SeqCst);
                format!("ERR starting the background save: {e}")
            })
    }

    fn claim(&self) -> Result<(), String> {
        self.running
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| ())
            .map_err(|_| IN_PROGRESS.to_owned())
    }

    fn finish(&self, r: &Result<(), String>) {
        if r.is_ok() {
            self.last_unix.store(now_ms() / 1000, Ordering::Relaxed);
        }
        self.last_failed.store(r.is_err(), Ordering::Relaxed);
        self.running.store(false, Ordering::SeqCst);
    }
}

/// The prefix of a save's directory name.
const SAVE_PREFIX: &str = "save-";

/// One save: a checkpoint into `dir` (older saves removed once it is
/// whole), or without `dir` a flush and a journal sync.
fn save_once(db: &Db, dir: Option<&Path>) -> Result<(), String> {
    let engine = crate::data::engine;
    let Some(dir) = dir else {
        db.flush().map_err(engine)?;
        return db.sync().map_err(engine);
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("ERR {}: {e}", dir.display()))?;
    let mut number = now_ms();
    let older = saves_in(dir)?;
    if let Some(&(newest, _)) = older.last() {
        number = number.max(newest + 1);
    }
    let target = dir.join(format!("{SAVE_PREFIX}{number}"));
    db.checkpoint(&target).map_err(engine)?;
    for (_, path) in older {
        // A failed removal leaves an older save that the next one retries.
        let _ = std::fs::remove_dir_all(path);
    }
    Ok(())
}

/// The saves in `dir` (and staging directories of saves cut short), by
/// number, oldest first.
fn saves_in(dir: &Path) -> Result<Vec<(u64, PathBuf)>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("ERR {}: {e}", dir.display()))?;
    let mut out: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(SAVE_PREFIX)?;
            let digits = rest.strip_suffix(CHECKPOINT_STAGING_SUFFIX).unwrap_or(rest);
            Some((digits.parse().ok()?, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}
