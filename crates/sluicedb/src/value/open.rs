//! Opening the value store a database has: the layout is the manifest's
//! (a database keeps the layout it was created with), or the options'
//! for a database that never separated a value.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::hash::{HashConfig, HashStore};
use super::log::store::{LogConfig, LogStore};
use super::meta::{ValueEdit, ValueMeta};
use super::table::store::{TableConfig, TableStore};
use super::ValueStore;
use crate::error::{Error, Result};
use crate::fs::CountingFs;
use crate::options::{Options, Preset, ValueLayout};
use crate::table::BlockCache;

/// A value store as the open found it.
pub(crate) struct OpenedStore {
    pub(crate) store: Arc<dyn ValueStore>,
    /// What the manifest must learn from the open (groups or tables found
    /// or dropped).
    pub(crate) edit: ValueEdit,
    /// The log layout's store itself: recovery reads it as the journal
    /// when the value log is the journal.
    pub(crate) log: Option<Arc<LogStore>>,
}

/// The layout of the store the database at `meta` has, when it has one:
/// the manifest's, or the options' when it never had one (`has_log_files`:
/// the directory holds value log files, which a log layout may have
/// written before its first manifest record).
fn layout_of(meta: &ValueMeta, has_log_files: bool, opts: &Options) -> Option<ValueLayout> {
    layout_found(meta, has_log_files).or_else(|| {
        opts.values
            .separation_threshold_bytes
            .map(|_| opts.values.layout)
    })
}

/// The layout of the store the database at `meta` has, if it has one.
fn layout_found(meta: &ValueMeta, has_log_files: bool) -> Option<ValueLayout> {
    if meta.table.created {
        Some(ValueLayout::Table)
    } else if !meta.hash.groups.is_empty() {
        Some(ValueLayout::Hash)
    } else if has_log_files || meta.log.journal_from.is_some() {
        Some(ValueLayout::Log)
    } else {
        None
    }
}

/// The default options (the `adaptive` preset) opening a database whose
/// value store has another layout than value tables (created under
/// `wisckey`, `hashkv` or a log or hash layout of one's own): its store
/// opens as it is, so every value it holds stays readable, and new values
/// stay inline. A named preset's options that separate into another
/// layout are refused instead (`open_store`): asking for a design and
/// getting another would be a surprise, while whoever opens with the
/// defaults expects any database to open.
pub(crate) fn fit_default_to_store(meta: &ValueMeta, has_log_files: bool, opts: &mut Options) {
    // Only the preset's own value settings: options changed from them
    // ask for a design, and are refused as a named preset's are.
    if opts.preset != Preset::Adaptive || opts.values != Options::preset(Preset::Adaptive).values {
        return;
    }
    if layout_found(meta, has_log_files).is_some_and(|l| l != opts.values.layout) {
        opts.values.separation_threshold_bytes = None;
        opts.values.separate_at_flush = false;
    }
}

/// Opens the database's value store, if it has or is to have one. The
/// store opens whenever the database has or had one, so that pointers
/// written under other options still resolve; options that separate
/// values into another layout than the database's are refused.
pub(crate) fn open_store(
    dir: &Path,
    fs: &CountingFs,
    file_numbers: Arc<AtomicU64>,
    meta: &ValueMeta,
    has_log_files: bool,
    opts: &Options,
    block_cache: &Arc<BlockCache>,
) -> Result<Option<OpenedStore>> {
    let Some(layout) = layout_of(meta, has_log_files, opts) else {
        return Ok(None);
    };
    if opts.values.separation_threshold_bytes.is_some() && layout != opts.values.layout {
        return Err(Error::InvalidArgument(format!(
            "the database's value store has layout {layout:?}; the options ask for {:?}",
            opts.values.layout
        )));
    }
    let mut edit = ValueEdit::default();
    // The log layout's store is also handed back as itself (`log`).
    let (store, log): (Arc<dyn ValueStore>, _) = match layout {
        ValueLayout::Hash => {
            let (store, e) = HashStore::open(
                dir,
                fs.clone(),
                file_numbers,
                &meta.hash,
                HashConfig::from_options(opts),
            )?;
            edit.hash.groups = e.groups;
            edit.hash.added = e.added;
            edit.hash.dropped = e.dropped;
            (Arc::new(store), None)
        }
        ValueLayout::Table => {
            let (store, e) = TableStore::open(
                dir,
                fs.clone(),
                file_numbers,
                &meta.table,
                TableConfig::from_options(opts),
                block_cache.clone(),
            )?;
            edit.table = e;
            (Arc::new(store), None)
        }
        ValueLayout::Log => {
            let store = Arc::new(LogStore::open(
                dir,
                fs.clone(),
                file_numbers,
                LogConfig::from_options(opts),
                meta.log.tail,
                &meta.log.sealed,
            )?);
            (store.clone(), Some(store))
        }
    };
    Ok(Some(OpenedStore { store, edit, log }))
}
