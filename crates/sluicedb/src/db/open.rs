//! Opening a database: creating or finding its manifest, opening the value
//! store its files call for, then recovery (`recover.rs`).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex};

use super::core::{Core, Jobs, State};
use super::delays::OwedDelays;
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{CountingFs, IoClass};
use crate::journal::JournalMark;
use crate::memtable::BlockPool;
use crate::options::{JournalMode, Options};
use crate::policy::Separation;
use crate::stats::Counters;
use crate::super_version::SuperVersion;
use crate::table::builder::TableOptions;
use crate::table::{BlockCache, TableCache};
use crate::value::log::journal::LogJournal;
use crate::value::ValueStore;
use crate::version::{Version, VersionEdit, VersionSet};

impl Core {
    pub(super) fn open(dir: PathBuf, mut opts: Options, fs: CountingFs) -> Result<Core> {
        let shape = crate::index::shape_for(&opts);
        if VersionSet::exists(&fs, &dir) {
            if opts.error_if_exists {
                return Err(Error::AlreadyExists(dir));
            }
        } else {
            if !opts.create_if_missing {
                return Err(Error::NotFound(dir));
            }
            // Creation writes only a manifest and CURRENT before any table,
            // journal or value store file exists; finding one without
            // CURRENT means CURRENT was lost, and creating anew would sweep
            // the data away (with the value log as the journal, the value
            // log files alone may hold every write).
            for name in fs.list(&dir)? {
                // LightKV's write buffer alone may hold every write too.
                if name == super::light::BUFFER_FILE {
                    return Err(Error::corruption(
                        filename::current(&dir),
                        0,
                        format!("CURRENT is missing but {name} exists; refusing to create a new database over it"),
                    ));
                }
                if let Some(
                    FileKind::Table(_)
                    | FileKind::Journal(_)
                    | FileKind::ValueLog(_)
                    | FileKind::ValueSegment(_)
                    | FileKind::ValueTable(_)
                    | FileKind::HashIndex(_),
                ) = filename::parse(&name)
                {
                    return Err(Error::corruption(
                        filename::current(&dir),
                        0,
                        format!("CURRENT is missing but {name} exists; refusing to create a new database over it"),
                    ));
                }
            }
            let vs = VersionSet::new(
                dir.clone(),
                fs.clone(),
                shape.clone(),
                1,
                opts.max_manifest_bytes,
            );
            let mut created = Version::empty(shape.clone());
            created.preset = Some(opts.preset.name().to_string());
            created.totals = Some(crate::stats::Totals::default());
            vs.write_new_manifest(&created, 0, 0)?;
        }
        let rec = match VersionSet::recover(&fs, &dir, shape.clone()) {
            // Another index shape (unikv's against a leveled one): a named
            // preset's mismatch is the clearer error.
            Err(Error::InvalidArgument(m)) if opts.preset_named => {
                check_preset(&opts, recorded_preset(&fs, &dir)?.as_deref())?;
                return Err(Error::InvalidArgument(m));
            }
            r => r?,
        };
        check_preset(&opts, rec.version.preset.as_deref())?;
        // A LightKV database stays one under options that name no preset:
        // its write buffer holds writes no journal has.
        let lightkv = opts.preset == crate::Preset::LightKv
            || rec.version.preset.as_deref() == Some(crate::Preset::LightKv.name());
        let manifest = filename::manifest(&dir, rec.manifest_number);
        let names = fs.list(&dir)?;
        let mut present = HashSet::new();
        let mut journals = Vec::new();
        let mut max_number = rec.manifest_number;
        for name in &names {
            match filename::parse(name) {
                Some(FileKind::Table(n)) => {
                    present.insert(n);
                    max_number = max_number.max(n);
                }
                Some(FileKind::Journal(n)) => {
                    max_number = max_number.max(n);
                    if n >= rec.log_number {
                        journals.push(n);
                    }
                }
                Some(
                    FileKind::Manifest(n)
                    | FileKind::ValueLog(n)
                    | FileKind::ValueSegment(n)
                    | FileKind::ValueTable(n)
                    | FileKind::HashIndex(n),
                ) => max_number = max_number.max(n),
                _ => {}
            }
        }
        for (_, f) in rec.version.all_files() {
            if !present.contains(&f.number) {
                return Err(Error::corruption(
                    filename::table(&dir, f.number),
                    0,
                    "table listed in the manifest is missing",
                ));
            }
        }
        journals.sort_unstable();
        let versions = VersionSet::new(
            dir.clone(),
            fs.clone(),
            shape.clone(),
            rec.next_file_number.max(max_number + 1),
            opts.max_manifest_bytes,
        );
        // The write buffer size and budget in force, which the cache's
        // sizes follow here as when they change (`Db::set_memory_budget`).
        let sizes = crate::memory::Sizes::new(&opts);
        let (cache_bytes, shared_bytes) = sizes.cache_sizes(None);
        let block_cache = Arc::new(BlockCache::with_budget(cache_bytes, shared_bytes));
        let tables = Arc::new(TableCache::new(
            fs.clone(),
            dir.clone(),
            opts.index.max_open_tables,
            block_cache.clone(),
        ));
        let table_opts = TableOptions {
            block_size_bytes: opts.index.block_size_bytes,
            restart_interval: opts.index.block_restart_interval,
            bloom_bits_per_key: opts.index.bloom_bits_per_key,
            decoupled: opts.index.index_decoupled_tables,
            // LightKV's on-disk leaves (ICDE, §III-D): a point read goes
            // from a table's leaf straight to the block holding the key.
            hash_leaf: lightkv,
        };
        let has_log_files = names
            .iter()
            .any(|n| matches!(filename::parse(n), Some(FileKind::ValueLog(_))));
        crate::value::open::fit_default_to_store(&rec.version.values, has_log_files, &mut opts);
        let opened = crate::value::open::open_store(
            &dir,
            &fs,
            versions.file_numbers(),
            &rec.version.values,
            has_log_files,
            &opts,
            tables.block_cache(),
        )?;
        let mut open_edit = VersionEdit::default();
        let mut value_log = None;
        let mut log_journal = None;
        let values: Option<Arc<dyn ValueStore>> = opened.map(|o| {
            open_edit.values = o.edit;
            if let Some(log) = o.log {
                if opts.journal_mode == JournalMode::ValueLog {
                    log_journal = Some(LogJournal::new(log.clone()));
                }
                value_log = Some(log);
            }
            o.store
        });
        // Counting begins here for a database that never recorded it.
        let totals_base = rec.version.totals.unwrap_or(crate::stats::Totals {
            since_sequence: rec.last_sequence,
            ..Default::default()
        });
        let version = Arc::new(rec.version);
        // Memtable blocks recycled from one memtable to the next, a write
        // buffer's worth at most, held in the memory budget.
        let block_pool = {
            let cache = block_cache.clone();
            let pool = Arc::new(BlockPool::new(
                opts.write_buffer_size_bytes,
                Box::new(move |excess| cache.give_way_to_pool(excess)),
            ));
            // Weak: the pool's callback holds the cache.
            let weak = Arc::downgrade(&pool);
            block_cache.set_pool_trim(Box::new(move || {
                weak.upgrade().is_some_and(|p| p.trim_if_idle())
            }));
            pool
        };
        let mem = super::core::write_buffer_for(
            values.as_ref(),
            opts.write_buffer_size_bytes,
            &block_pool,
        );
        let state = State {
            mem: mem.clone(),
            mem_mark: JournalMark::File(0),
            mem_unjournaled_from: None,
            imms: VecDeque::new(),
            light_pressure: None,
            block_cache,
            current: version.clone(),
            sv: Arc::new(SuperVersion {
                mem,
                imms: Vec::new(),
                current: version,
            }),
            log_number: rec.log_number,
            last_sequence: rec.last_sequence,
            writers: VecDeque::new(),
            snapshots: BTreeMap::new(),
            jobs: Jobs::new(),
            live_versions: Vec::new(),
            memtables_switched: 0,
            memtables_flushed: 0,
            poisoned: None,
            closing: false,
            space_note: None,
        };
        let core = Core {
            dir,
            separation: Separation::from_options(&opts),
            opts,
            fs,
            shape,
            tables,
            versions,
            manifest: Mutex::new(None),
            state: Mutex::new(state),
            cv: Condvar::new(),
            bg_cv: Condvar::new(),
            journal: OnceLock::new(),
            lightkv,
            light: OnceLock::new(),
            block_pool,
            sizes,
            visible_seq: AtomicU64::new(rec.last_sequence),
            // Recovery moves it past what it replays and flushes.
            durable_seq: AtomicU64::new(rec.last_sequence),
            unjournaled_floor: AtomicU64::new(u64::MAX),
            space_ratio_milli: AtomicU64::new(0),
            space_delays: OwedDelays::default(),
            separable_written: AtomicBool::new(false),
            shadows_uncounted: AtomicU64::new(0),
            space_measure: Default::default(),
            garbage_share_milli: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            counters: Counters::default(),
            totals_base,
            table_opts,
            values,
            gc_lock: Mutex::new(()),
            flush_appends: Mutex::new(()),
            merge_appends: parking_lot::RwLock::new(()),
            file_deletion: parking_lot::RwLock::new(()),
            #[cfg(test)]
            flush_hook: Mutex::new(None),
            gc_pool: OnceLock::new(),
            gc_finisher: OnceLock::new(),
        };
        core.recover(&journals, open_edit, &manifest, value_log, log_journal)?;
        // In-memory indexes of the recovered tables (the unified shape's
        // hash index: its checkpoint, then the tables it does not cover).
        let current = core.state.lock().current.clone();
        let checkpoint = current
            .hash_index_checkpoint
            .map(|n| filename::hash_index(&core.dir, n));
        core.shape.opened(
            &current,
            &core.tables,
            checkpoint
                .as_deref()
                .map(|p| (p, core.fs.read_all(p, IoClass::Flush))),
        )?;
        if core.keeps_shadowed_count() {
            // Taken by the first flush (`Core::sample_shadowed_after_open`),
            // or here by a read-only open, which runs none: `sluice info`
            // reported the space amplification of a store full of dead
            // versions as 1.01.
            core.space_measure.expect_sample();
        }
        if core.opts.read_only {
            core.sample_shadowed_after_open(0);
        } else {
            core.recount_values()?;
        }
        if let Some(v) = &core.values {
            v.after_open();
        }
        core.delete_obsolete_files();
        core.measure_space();
        // A store reopened with separated values has GC's memory from now.
        core.fit_memory_to_separated_values();
        Ok(core)
    }
}

/// A named preset ([`Options::preset`]) must be the one the database was
/// created with, as its manifest records it; the default options, and a
/// database older than the record, open under any.
fn check_preset(opts: &Options, recorded: Option<&str>) -> Result<()> {
    match recorded {
        Some(r) if opts.preset_named && r != opts.preset.name() => {
            Err(Error::InvalidArgument(format!(
                "the database was created with preset {r}, and the options name preset {}: \
                 open it with its own preset (Options::preset for {r}, or Options::default())",
                opts.preset.name()
            )))
        }
        _ => Ok(()),
    }
}

/// The preset the manifest at `dir` records. The manifest names its index
/// shape and recovery checks it against the one given, so each shape is
/// tried.
pub(super) fn recorded_preset(fs: &CountingFs, dir: &Path) -> Result<Option<String>> {
    let shape = crate::index::shape_for(&Options::default());
    let mut rec = VersionSet::recover(fs, dir, shape);
    for other in [crate::Preset::UniKv, crate::Preset::LightKv] {
        if !matches!(rec, Err(Error::InvalidArgument(_))) {
            break;
        }
        rec = VersionSet::recover(fs, dir, crate::index::shape_for(&Options::preset(other)));
    }
    let rec = rec?;
    Ok(rec.version.preset)
}
