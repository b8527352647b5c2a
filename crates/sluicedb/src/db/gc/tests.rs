//! Data-driven tests of the relocation rule and of GC's validity check
//! (`testdata/relocation/*.txt`; the notation is described in
//! `testdata/relocation/README.md`).
//!
//! Each file is a series of commands, each followed by `----` and the
//! output it must give, then a blank line. The test runs every command
//! against a database on the in-memory file system and compares.
//! `SLUICE_REWRITE=1` rewrites the expected outputs instead (check the diff
//! before committing it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::fs::{IoClass, MemFs};
use crate::gc::{Relocation, Relocations, SeenView};
use crate::options::{JournalMode, Options, ValueLayout};
use crate::record::{Record, FLAG_GC_COPY, KIND_PUT};
use crate::{Db, Snapshot};

/// Values shorter than this stay inline in the index.
const THRESHOLD: usize = 4;

struct Harness {
    db: Option<Db>,
    view: Option<SeenView>,
    moves: Vec<Relocation>,
    snapshots: HashMap<String, Snapshot>,
}

fn options(fs: &MemFs, kind: &str) -> Result<Options, String> {
    // The plain preset: each kind names its layout from there.
    let o = Options::preset(crate::Preset::LevelDb)
        .fs(Arc::new(fs.clone()))
        .separation_threshold_bytes(Some(THRESHOLD))
        .gc_garbage_ratio(None)
        // GC runs only when a command asks.
        .space_limit(None)
        .value_log_file_size_bytes(4096)
        .background_threads(1);
    Ok(match kind {
        "log" => o,
        "log-journal" => o.journal_mode(JournalMode::ValueLog),
        "hash" => o
            .value_layout(ValueLayout::Hash)
            .hash_groups(1)
            .hash_main_segment_bytes(8192)
            .hash_log_segment_bytes(4096),
        _ => return Err(format!("unknown database kind {kind}")),
    })
}

impl Harness {
    fn db(&self) -> &Db {
        self.db.as_ref().expect("`open` comes first")
    }

    fn run(&mut self, cmd: &str, args: &[&str]) -> Result<String, String> {
        let e = |e: crate::Error| e.to_string();
        let arg = |i: usize| -> Result<&str, String> {
            args.get(i)
                .copied()
                .ok_or_else(|| format!("{cmd}: argument {} missing", i + 1))
        };
        Ok(match cmd {
            "open" => {
                self.snapshots.clear();
                self.view = None;
                self.moves.clear();
                self.db = None;
                let fs = MemFs::new();
                self.db = Some(Db::open("/db", options(&fs, arg(0)?)?).map_err(e)?);
                "ok".into()
            }
            "put" => {
                let mut value = arg(1)?.as_bytes().to_vec();
                if let Some(size) = args.get(2) {
                    let size: usize = size.parse().map_err(|_| "put: bad size")?;
                    value.resize(size.max(value.len()), b'.');
                }
                self.db().put(arg(0)?, value).map_err(e)?;
                "ok".into()
            }
            "delete" => {
                self.db().delete(arg(0)?).map_err(e)?;
                "ok".into()
            }
            "flush" => {
                self.db().flush().map_err(e)?;
                "ok".into()
            }
            "get" => match self.db().get(arg(0)?).map_err(e)? {
                Some(v) => format!("{} = {}", arg(0)?, show(&v)),
                None => format!("{}: absent", arg(0)?),
            },
            "snapshot" => {
                let s = self.db().snapshot();
                self.snapshots.insert(arg(0)?.to_string(), s);
                "ok".into()
            }
            "release" => {
                self.snapshots.remove(arg(0)?);
                "ok".into()
            }
            // GC's view, taken after the publish barrier as a GC step does.
            "view" => {
                let core = self.db().core();
                core.publish_barrier().map_err(e)?;
                let v = core.gc_view();
                let out = format!("view at sequence {}", v.seq);
                self.view = Some(v);
                out
            }
            // Copies the record `key` points at in the view, as GC's collect
            // does, and queues its relocation.
            "copy" => {
                let key = arg(0)?;
                let core = self.db().core();
                let view = self.view.as_ref().ok_or("copy: no view")?;
                let Some(old) = core
                    .pointer_at(&view.sv, key.as_bytes(), view.seq)
                    .map_err(e)?
                else {
                    return Ok(format!("{key}: no pointer in the view"));
                };
                let store = core.values.as_ref().ok_or("copy: no value store")?;
                let rec = store.read(&old, key.as_bytes(), IoClass::Gc).map_err(e)?;
                let new = store
                    .append(&Record {
                        seq: rec.seq,
                        flags: KIND_PUT | FLAG_GC_COPY,
                        key: key.as_bytes(),
                        value: &rec.value,
                    })
                    .map_err(e)?;
                store.sync().map_err(e)?;
                self.moves.push(Relocation {
                    key: key.as_bytes().to_vec(),
                    old,
                    new,
                });
                format!("{key}: copied {}", show(&rec.value))
            }
            "commit" => {
                let moves = std::mem::take(&mut self.moves);
                let n = moves.len() as u64;
                let seen = self.view.take();
                let core = self.db().core();
                let applied = core
                    .submit_relocations(Relocations { moves, seen })
                    .map_err(e)?
                    .applied;
                format!("applied {applied} dropped {}", n - applied)
            }
            // Steps 4-7 of a GC step (relocation commit, journal sync,
            // install, deletes) for the queued copies, as `gc` runs them.
            "finish" => {
                let moves = std::mem::take(&mut self.moves);
                let seen = self.view.take().ok_or("finish: no view")?;
                let collected = crate::gc::Collected {
                    moves,
                    ..Default::default()
                };
                let core = self.db().core();
                let (s, _) = core.finish_gc_step(collected, seen, || {}).map_err(e)?;
                format!(
                    "applied {} dropped {}",
                    s.relocations_applied, s.relocations_dropped
                )
            }
            "garbage" => {
                let s = self.db().stats();
                format!("value garbage {} bytes", s.values.garbage_bytes)
            }
            "gc" => match self.db().core().gc_once().map_err(e)? {
                None => "nothing to collect".into(),
                Some((s, freed)) => format!(
                    "records {} live {} applied {} dropped {} files freed {freed}",
                    s.records, s.live_records, s.relocations_applied, s.relocations_dropped
                ),
            },
            // Value store files on disk.
            "files" => {
                let core = self.db().core();
                let store = core.values.as_ref().ok_or("files: no value store")?;
                format!("value files {}", store.file_count())
            }
            "reopen" => {
                let fs = match self.db.take() {
                    Some(db) => {
                        let o = db.core().opts.clone();
                        self.snapshots.clear();
                        drop(db);
                        o
                    }
                    None => return Err("reopen: nothing open".into()),
                };
                self.db = Some(Db::open("/db", fs).map_err(e)?);
                "ok".into()
            }
            other => return Err(format!("unknown command {other}")),
        })
    }
}

/// A value as the notation writes it: padding shown as its size.
fn show(v: &[u8]) -> String {
    let text = String::from_utf8_lossy(v);
    let trimmed = text.trim_end_matches('.');
    if trimmed.len() == v.len() {
        trimmed.to_string()
    } else {
        format!("{trimmed} ({} bytes)", v.len())
    }
}

/// One command of a test file, its expected output, and where it is.
struct Case {
    /// Comment lines before it (kept by a rewrite).
    comments: String,
    line: usize,
    command: String,
    expected: String,
}

fn parse(text: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    let mut comments = String::new();
    while let Some((n, line)) = lines.next() {
        if line.starts_with('#') {
            comments.push_str(line);
            comments.push('\n');
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let sep = lines.next().map(|(_, l)| l);
        assert_eq!(sep, Some("----"), "line {}: `----` after a command", n + 2);
        let mut expected = Vec::new();
        while let Some((_, l)) = lines.peek() {
            if l.trim().is_empty() {
                break;
            }
            expected.push(*l);
            lines.next();
        }
        cases.push(Case {
            comments: std::mem::take(&mut comments),
            line: n + 1,
            command: line.to_string(),
            expected: expected.join("\n"),
        });
    }
    cases
}

fn run_file(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut h = Harness {
        db: None,
        view: None,
        moves: Vec::new(),
        snapshots: HashMap::new(),
    };
    let rewrite = std::env::var_os("SLUICE_REWRITE").is_some();
    let mut out = String::new();
    let mut failures = Vec::new();
    for case in parse(&text) {
        // Printed so that a panic shows where it happened.
        println!("{}:{}: {}", path.display(), case.line, case.command);
        let words: Vec<&str> = case.command.split_whitespace().collect();
        let got = match h.run(words[0], &words[1..]) {
            Ok(s) => s,
            Err(s) => format!("error: {s}"),
        };
        if got != case.expected {
            failures.push(format!(
                "{}:{}: {}\n  expected: {}\n  got:      {}",
                path.display(),
                case.line,
                case.command,
                case.expected,
                got
            ));
        }
        out.push_str(&format!(
            "{}{}\n----\n{}\n\n",
            case.comments, case.command, got
        ));
    }
    if rewrite {
        std::fs::write(path, format!("{}\n", out.trim_end_matches('\n'))).unwrap();
        return;
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/relocation")
}

#[test]
fn relocation_rule() {
    run_file(&testdata().join("rule.txt"));
}

#[test]
fn gc_keeps_what_the_index_points_at() {
    run_file(&testdata().join("gc.txt"));
}

/// A reader that registers while a step's victims are still served as
/// live keeps them on disk, however far the visible sequence moved since
/// the step began. The table layout's pointers name victims until their
/// edges are pruned, so such a reader may locate a victim as live and read
/// it later; the barrier used to be taken before the install, below this
/// reader's sequence, and the victim was deleted under it (the model test
/// hit it about once in 100 runs under load, as "index entry points into a
/// value store file that GC collected").
#[test]
fn a_reader_registered_before_the_victims_retire_keeps_them() {
    use crate::fs::Fs;
    let fs = MemFs::new();
    let opts = Options::default()
        .fs(Arc::new(fs.clone()))
        .separation_threshold_bytes(Some(0))
        .value_layout(ValueLayout::Table)
        .separate_at_flush(true)
        .journal_mode(JournalMode::Journal)
        // No background GC: the test runs the one step itself.
        .table_gc_ratio(0.99)
        .gc_garbage_ratio(None)
        .space_limit(None)
        .background_threads(1);
    let db = Db::open("/db", opts).unwrap();
    for k in 0..20 {
        db.put(format!("k{k:02}"), vec![b'a'; 100]).unwrap();
    }
    db.flush().unwrap();
    for k in 0..10 {
        db.put(format!("k{k:02}"), vec![b'b'; 100]).unwrap();
    }
    db.flush().unwrap();
    // Drops the overwritten versions: their records count as garbage.
    db.compact_range(None, None).unwrap();
    let core = db.core().clone();
    let store = core.values.as_ref().unwrap().clone();
    let host = Pressed(core.as_ref());
    let mut victim = store.gc_victim(&host).unwrap().expect("a victim");
    let seen = core.gc_view();
    let c = victim.collect(&host, &seen).unwrap();
    let victims = c.frees.clone();
    assert!(!victims.is_empty());
    let mut reader = None;
    core.finish_gc_step(c, seen, || {
        // Installed, not yet retired: the victims are still live to reads.
        // Writes move the visible sequence past where the step began.
        for k in 0..3 {
            db.put(format!("new{k}"), b"x").unwrap();
        }
        reader = Some(db.iter());
        victim.installed();
    })
    .unwrap();
    let path = |f: u64| crate::filename::value_table(Path::new("/db"), f);
    for &f in &victims {
        assert!(
            fs.exists(&path(f)),
            "victim {f} deleted under a reader registered before it retired"
        );
    }
    drop(reader);
    core.delete_collected_files();
    for &f in &victims {
        assert!(!fs.exists(&path(f)), "victim {f} kept with no reader left");
    }
}

/// The engine as GC's host, always under space pressure: victims from the
/// pressure ratio (1/16) while background GC's ratio finds none.
struct Pressed<'a>(&'a crate::db::core::Core);

impl crate::gc::GcHost for Pressed<'_> {
    fn current(&self) -> Arc<crate::version::Version> {
        self.0.current()
    }
    fn install(&self, edit: crate::version::VersionEdit) -> crate::Result<()> {
        crate::gc::GcHost::install(self.0, edit)
    }
    fn newest_of(&self, view: &SeenView, key: &[u8]) -> crate::Result<crate::gc::Newest> {
        crate::gc::GcHost::newest_of(self.0, view, key)
    }
    fn relocate(
        &self,
        moves: Vec<Relocation>,
        view: &SeenView,
    ) -> crate::Result<crate::gc::Committed> {
        self.0.relocate(moves, view)
    }
    fn pool(&self) -> Option<&rayon::ThreadPool> {
        None
    }
    fn under_space_pressure(&self) -> bool {
        true
    }
}

/// A GC step that runs while a flush is between appending values to the
/// group it collects and installing its tables (the hash layout's steps
/// do not wait for flushes: `GcProfile::waits_for_flushes`) takes the
/// flush's records of the versions its memtable holds for live
/// (`Newest::Inline`): it moves them, every value reads back, also after
/// a reopen, and the accounting stays exact.
#[test]
fn a_hash_gc_step_during_a_flush_keeps_the_versions_it_flushes() {
    let fs = MemFs::new();
    let opts = Options::default()
        .fs(Arc::new(fs.clone()))
        .value_layout(ValueLayout::Hash)
        .separate_at_flush(true)
        .separation_threshold_bytes(Some(0))
        .journal_mode(JournalMode::Journal)
        .hash_groups(1)
        .hash_hotness(false)
        .gc_garbage_ratio(None)
        .space_limit(None)
        .background_threads(1);
    let val = |k: u32, round: u32| format!("k{k:02} round {round}").repeat(8).into_bytes();
    let db = Db::open("/db", opts.clone()).unwrap();
    for round in 0..2 {
        for k in 0..10 {
            db.put(format!("k{k:02}"), val(k, round)).unwrap();
        }
        if round == 0 {
            db.flush().unwrap();
        }
    }
    // The second flush appends round 1 to the group's head, then GC
    // freezes that head (with round 0 and round 1 in it) and collects it
    // before the flush's pointers to round 1 are in the index.
    let step = Arc::new(parking_lot::Mutex::new(None));
    let seen = step.clone();
    *db.core().flush_hook.lock() = Some(Box::new(move |core: &crate::db::core::Core| {
        *seen.lock() = Some(core.gc_once());
    }));
    db.flush().unwrap();
    let (stats, freed) = step
        .lock()
        .take()
        .expect("the hook ran")
        .unwrap()
        .expect("a step collected the group");
    assert_eq!(stats.records, 20, "{stats:?}");
    assert_eq!(stats.relocations_applied, 10, "{stats:?}");
    assert!(freed > 0, "{stats:?}");
    let check = |db: &Db, when: &str| {
        for k in 0..10 {
            assert_eq!(
                db.get(format!("k{k:02}")).unwrap(),
                Some(val(k, 1)),
                "{when}: k{k:02}"
            );
        }
        assert_eq!(
            db.check_space().unwrap(),
            vec![],
            "{when}: space accounting"
        );
    };
    check(&db, "after the flush");
    drop(db);
    let db = Db::open("/db", opts).unwrap();
    check(&db, "reopened");
    db.compact_range(None, None).unwrap();
    check(&db, "compacted");
}
