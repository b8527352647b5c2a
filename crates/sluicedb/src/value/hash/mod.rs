//! [`HashStore`]: HashKV's hash layout (HashKV, USENIX ATC '18, §3.2). Values go to the
//! segment group `xxh3(key) mod G`, so every version of a key lands in one
//! group and a group can be collected by scanning it alone (§3.3).
//!
//! A group is a short list of files (`NNNNNN.vseg`, the value log's record
//! format, `docs/format/value-hash.md`); appends go to the newest. Its first
//! `main_segment_bytes` are the main segment; each further
//! `log_segment_bytes` is a log segment taken from the reserve, which is how
//! the reserve is accounted. Each open starts a new file per group, so that
//! only files from before the open can end torn; after replay, a group whose
//! new file is unused goes back to its old head if that holds less than a
//! log segment, and GC collects first a group that opens left with more
//! sealed files than its bytes make log segments (`docs/design.md`, "Hash
//! layout", *Files per group*). The manifest lists the files of every group
//! (`docs/format/manifest.md`, tags 12-14).
//!
//! With hotness awareness (§3.4) GC moves the values of keys not updated
//! since the group's last GC to the *cold log*: one more file list, after
//! the groups, that only GC writes to. The manifest names it as group
//! [`COLD_GROUP`].
//!
//! Without a capacity the layout is elastic (`docs/design.md`, "Hash
//! layout: elastic groups"): a GC step whose group holds more than a main
//! segment of live data first splits it by the next hash bits (extendible
//! hashing under each root group), so a step stays about one main segment
//! whatever the store holds. A split moves nothing: the parent's files stay
//! its own and its GC copies each live record to the key's group.
//!
//! GC per group and of the cold log lives in `gc.rs`.

mod gc;
pub(crate) mod meta;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use xxhash_rust::xxh3::xxh3_64;

use super::files::{check_within, cut_torn_tail, FileReaders, Located, RecordFiles};
use super::log::reader::{check_record, scan_file};
use super::log::writer::VlogWriter;
use super::{GcProfile, PointerCheck, ValueAccounting, ValueGc, ValueRecovery, ValueStore};
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{CountedWriter, CountingFs, IoClass};
use crate::gc::{GcHost, GcTrigger, GcVictim};
use crate::options::{HashGcPolicy, Options};
use crate::pointer::{ValuePointer, STORE_COLD, STORE_HASH};
use crate::policy::GroupCandidate;
use crate::record::{Record, FILE_HEADER_LEN, FLAG_FIRST_VERSION};
use crate::stats::ValueStats;
use crate::version::{Version, VersionEdit};
use meta::{GroupShape, HashEdit, HashMeta, COLD_GROUP};

/// Most fsyncs [`HashStore::sync_heads`] runs at once: a flush leaves a
/// head dirty in most groups, and syncing them one after another took a
/// flush about 24 ms of its 180 (2 GiB hashkv update run, 34 heads a
/// sync).
const PARALLEL_HEAD_SYNCS: usize = 8;

/// Sizes of the hash layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HashConfig {
    pub(crate) main_segment_bytes: u64,
    pub(crate) log_segment_bytes: u64,
    pub(crate) batch_bytes: usize,
    /// Groups of a new store (an existing one keeps its own).
    pub(crate) new_groups: u32,
    pub(crate) prefetch_threads: usize,
    pub(crate) policy: HashGcPolicy,
    /// Log segments in the reserve, when a capacity is set.
    pub(crate) reserve_segments: Option<u64>,
    /// Hotness awareness (§3.4): GC moves cold values to the cold log,
    /// whose files are started anew past this size.
    pub(crate) cold_file_bytes: Option<u64>,
    /// Elastic groups: GC splits a group holding more live bytes than
    /// this. None with a capacity (HashKV's fixed groups, §3.2).
    pub(crate) split_bytes: Option<u64>,
}

impl HashConfig {
    /// The hash layout's sizes from the options; the number of groups of a new
    /// store comes from the capacity when it is set.
    pub(crate) fn from_options(opts: &Options) -> HashConfig {
        let groups = match (opts.values.hash.groups, opts.values.capacity_bytes) {
            (0, Some(cap)) => {
                let main_area = cap as f64 * (1.0 - opts.values.hash.reserve_ratio);
                // At most what a manifest may record (`meta::MAX_ROOT_GROUPS`).
                (main_area / opts.values.hash.main_segment_bytes as f64)
                    .clamp(1.0, f64::from(meta::MAX_ROOT_GROUPS)) as u32
            }
            (0, None) => crate::options::DEFAULT_HASH_GROUPS as u32,
            (n, _) => n as u32,
        };
        HashConfig {
            main_segment_bytes: opts.values.hash.main_segment_bytes,
            log_segment_bytes: opts.values.hash.log_segment_bytes,
            batch_bytes: opts.values.hash.batch_bytes,
            new_groups: groups,
            prefetch_threads: opts.values.scan_prefetch_threads.max(1),
            policy: opts.values.hash.gc_policy,
            // Cold log files of a quarter main segment: GC frees space a file
            // at a time.
            cold_file_bytes: opts.values.hash.hotness.then(|| {
                (opts.values.hash.main_segment_bytes / 4).max(opts.values.hash.log_segment_bytes)
            }),
            split_bytes: (opts.values.hash.elastic && opts.values.capacity_bytes.is_none())
                .then_some(opts.values.hash.main_segment_bytes),
            reserve_segments: opts.values.capacity_bytes.map(|cap| {
                ((cap as f64 * opts.values.hash.reserve_ratio) as u64
                    / opts.values.hash.log_segment_bytes)
                    .max(1)
            }),
        }
    }
}

struct Group {
    /// The cold log, not a hash group: it takes no log segments.
    cold: bool,
    /// The newest file; appends go here through a batch buffer.
    head: VlogWriter,
    /// Older files, oldest first, with their lengths.
    sealed: Vec<(u64, u64)>,
    /// The group's newest file with records before this open: the only
    /// one whose end may have been torn by a crash (a GC syncs a head before
    /// the next one takes records).
    newest_at_open: Option<u64>,
    /// The group's oldest file when the store opened (listed or new):
    /// files of the group below it were collected.
    first_at_open: u64,
    /// Bytes appended since the group was last collected (greedy victim
    /// choice, HashKV, USENIX ATC '18, §3.3).
    written_since_gc: u64,
    /// When the group was last collected (or the store opened): its age
    /// for the cost-benefit policy.
    last_gc: Instant,
    /// True while every record in the head is a first version
    /// (`FLAG_FIRST_VERSION`), and the sealed files of this open of which
    /// that held when they were sealed: GC may hand them to the cold log
    /// whole (never the cold log's own).
    head_first_only: bool,
    first_only: HashSet<u64>,
}

impl Group {
    /// True if a crash may have cut `file` short: the newest file with
    /// records before this open, or a later one (empty then).
    fn may_be_torn(&self, file: u64) -> bool {
        self.newest_at_open.is_some_and(|n| file >= n)
    }

    fn bytes(&self) -> u64 {
        self.sealed.iter().map(|&(_, len)| len).sum::<u64>() + self.head.len()
    }

    /// True when a hash group holds more sealed files than its bytes make
    /// whole log segments (`log_segment_bytes`), and more than one: every
    /// open seals each head, however little it holds, and only GC of the
    /// group takes sealed files away (`docs/design.md`, "Hash layout",
    /// *Files per group*). Never the cold log, whose files GC collects one
    /// at a time.
    fn over_file_budget(&self, log_segment_bytes: u64) -> bool {
        let budget = (self.bytes() / log_segment_bytes.max(1)).max(1);
        !self.cold && self.sealed.len() as u64 > budget
    }
}

/// Which group a key belongs to: extendible hashing under each root group
/// (`docs/design.md`, "Hash layout: elastic groups"). A key with hash `h`
/// has root `h mod roots`; under it a directory of `2^d` entries maps the
/// low `d` bits of `h / roots` to a group, several entries sharing a group
/// shallower than `d`.
struct Directory {
    roots: u64,
    /// Shape of each hash group.
    shapes: Vec<GroupShape>,
    /// The group each hash group was split from (None for roots).
    parents: Vec<Option<u32>>,
    /// Per root, the group of each pattern of its directory's depth.
    dirs: Vec<Vec<u32>>,
}

impl Directory {
    /// The roots of a store of `groups` groups, split as `meta` records
    /// (in order, as at run time).
    fn new(meta: &HashMeta, groups: usize) -> Directory {
        let roots = groups - meta.parents.len();
        let mut d = Directory {
            roots: roots as u64,
            shapes: GroupShape::roots(roots),
            parents: vec![None; roots],
            dirs: (0..roots as u32).map(|r| vec![r]).collect(),
        };
        for &parent in &meta.parents {
            d.split(parent);
        }
        d
    }

    /// The group of `key`.
    fn route(&self, key: &[u8]) -> u32 {
        let h = xxh3_64(key);
        let dir = &self.dirs[(h % self.roots) as usize];
        dir[((h / self.roots) as usize) & (dir.len() - 1)]
    }

    /// Splits `parent` by its next hash bit into itself and a new group
    /// (the next id), whose keys are those with that bit set.
    fn split(&mut self, parent: u32) -> u32 {
        let child = self.shapes.len() as u32;
        let shape = self.shapes[parent as usize].split();
        let dir = &mut self.dirs[shape.root as usize];
        if dir.len() < 1 << shape.depth {
            dir.extend_from_within(..);
        }
        let mut e = shape.pattern as usize;
        while e < dir.len() {
            dir[e] = child;
            e += 1 << shape.depth;
        }
        self.shapes.push(shape);
        self.parents.push(Some(parent));
        child
    }

    /// True if a record of a key of group `g` may sit in a file of group
    /// `owner`: `owner` is `g` or one of the groups it was split from.
    fn may_hold(&self, owner: u32, mut g: u32) -> bool {
        loop {
            if g == owner {
                return true;
            }
            match self.parents[g as usize] {
                Some(p) => g = p,
                None => return false,
            }
        }
    }
}

struct Inner {
    /// The hash groups, then the cold log.
    groups: Vec<Group>,
    /// The group of every key.
    dir: Directory,
    /// The group (manifest id) of every live file.
    owner: HashMap<u64, u32>,
    /// Files GC collected that readers may still need: (group, length).
    retiring: HashMap<u64, (u32, u64)>,
    /// Files GC collected and deleted.
    collected: HashSet<u64>,
    /// Files dropped by this open, deleted once the manifest says so.
    dropped: Vec<u64>,
    /// GC steps frozen and not yet done (`Core::gc_pipeline`): the groups and
    /// cold log files they collect or copy into are no other step's victim.
    busy_groups: HashSet<u32>,
    busy_cold: HashSet<u64>,
    steps_in_flight: usize,
    /// Cold log files GC handed over from a group in this open: pointers
    /// into them name the group's store id (`STORE_HASH`), among them
    /// those a flush still to install will name.
    handed: HashSet<u64>,
}

impl Inner {
    /// Cold log files that may be victims again.
    fn release_cold(&mut self, files: &[u64]) {
        for f in files {
            self.busy_cold.remove(f);
        }
    }

    /// Number of hash groups (the cold log comes after them).
    fn hash_groups(&self) -> usize {
        self.groups.len() - 1
    }

    /// Index into `groups` of the manifest's group id `id`.
    fn index(&self, id: u32) -> usize {
        if id == COLD_GROUP {
            self.hash_groups()
        } else {
            id as usize
        }
    }

    fn cold(&self) -> &Group {
        &self.groups[self.hash_groups()]
    }

    /// The group of manifest id `id`.
    fn group(&self, id: u32) -> &Group {
        &self.groups[self.index(id)]
    }

    /// The group whose head is file `number` (None once it is not a
    /// head): found through the file's owner, since splits shift the
    /// cold log's place in `groups`.
    fn by_head(&mut self, number: u64) -> Option<&mut Group> {
        let i = self.index(*self.owner.get(&number)?);
        Some(&mut self.groups[i]).filter(|g| g.head.number() == number)
    }
}

/// The store id of pointers into a group's files.
fn store_id(cold: bool) -> u8 {
    if cold {
        STORE_COLD
    } else {
        STORE_HASH
    }
}

/// The manifest's id of group index `i` among `n` hash groups.
fn group_id(i: usize, n: usize) -> u32 {
    if i == n {
        COLD_GROUP
    } else {
        i as u32
    }
}

pub(crate) struct HashStore {
    dir: PathBuf,
    fs: CountingFs,
    file_numbers: Arc<AtomicU64>,
    config: HashConfig,
    inner: Mutex<Inner>,
    readers: FileReaders,
    appended_bytes: AtomicU64,
    total_bytes: AtomicU64,
    /// State of the greedy-random policy's generator.
    random: AtomicU64,
    /// Log segments in use, kept with every change to a group's size so
    /// that the write path checks the reserve without a lock.
    segments_in_use: AtomicU64,
    /// Bytes GC moved to the cold log, bytes of files it handed to the
    /// cold log whole, and GC steps that collected a cold log file
    /// (statistics).
    cold_moved_bytes: AtomicU64,
    cold_handed_bytes: AtomicU64,
    cold_gc_runs: AtomicU64,
    /// Group splits since the store opened (statistics).
    splits: AtomicU64,
}

/// Log segments a group takes from the reserve: its bytes beyond the main
/// segment, in whole log segments.
fn segments_of(g: &Group, config: &HashConfig) -> u64 {
    if g.cold {
        return 0;
    }
    g.bytes()
        .saturating_sub(config.main_segment_bytes)
        .div_ceil(config.log_segment_bytes)
}

/// The group of `key` among `groups`.
#[cfg(test)]
pub(crate) fn group_of(key: &[u8], groups: usize) -> u32 {
    (xxh3_64(key) % groups as u64) as u32
}

impl HashStore {
    /// Opens the groups `meta` lists (creating `config.new_groups` groups
    /// for a new store): files holding no record are dropped, files no
    /// group lists are removed (an interrupted open left them), and a new
    /// head file is started in every group.
    pub(crate) fn open(
        dir: &Path,
        fs: CountingFs,
        file_numbers: Arc<AtomicU64>,
        meta: &HashMeta,
        config: HashConfig,
    ) -> Result<(HashStore, HashEdit)> {
        let mut edit = HashEdit::default();
        let mut lists: Vec<Vec<u64>> = if meta.groups.is_empty() {
            let n = config.new_groups.max(1);
            edit.groups = Some(n);
            vec![Vec::new(); n as usize]
        } else {
            meta.groups.clone()
        };
        let n = lists.len();
        lists.push(meta.cold.clone());
        let listed: HashSet<u64> = lists.iter().flatten().copied().collect();
        for name in fs.list(dir)? {
            if let Some(FileKind::ValueSegment(n)) = filename::parse(&name) {
                if !listed.contains(&n) {
                    fs.remove(&filename::value_segment(dir, n))?;
                }
            }
        }
        let mut groups = Vec::with_capacity(lists.len());
        let mut owner = HashMap::new();
        let mut dropped = Vec::new();
        for (i, files) in lists.iter().enumerate() {
            let g = group_id(i, n);
            let mut sealed = Vec::new();
            // Files made after the last one with records hold none: the
            // crash (or a failed write) came before anything reached them,
            // so the last file with records is the one that may end torn,
            // with every later one. When none holds records, any of them
            // may have lost what was written to it.
            let mut newest_with_records = files.first().copied();
            for &n in files {
                let path = filename::value_segment(dir, n);
                if !fs.exists(&path) {
                    return Err(Error::corruption(
                        path,
                        0,
                        "segment group file listed in the manifest is missing",
                    ));
                }
                let len = fs.open(&path)?.len();
                if len <= FILE_HEADER_LEN as u64 {
                    edit.dropped.push((g, n));
                    dropped.push(n);
                } else {
                    sealed.push((n, len));
                    owner.insert(n, g);
                    newest_with_records = Some(n);
                }
            }
            let number = file_numbers.fetch_add(1, Ordering::SeqCst);
            let f = fs.create(&filename::value_segment(dir, number), IoClass::ValueStore)?;
            edit.added.push((g, number));
            owner.insert(number, g);
            groups.push(Group {
                first_at_open: files.first().copied().unwrap_or(number),
                cold: i == n,
                head: VlogWriter::for_store(f, number, config.batch_bytes, store_id(i == n)),
                sealed,
                newest_at_open: newest_with_records,
                written_since_gc: 0,
                last_gc: Instant::now(),
                head_first_only: i != n,
                first_only: HashSet::new(),
            });
        }
        fs.sync_dir(dir)?;
        let total = groups.iter().map(Group::bytes).sum();
        let directory = Directory::new(meta, n);
        let segments = groups.iter().map(|g| segments_of(g, &config)).sum();
        let store = HashStore {
            dir: dir.to_path_buf(),
            fs: fs.clone(),
            file_numbers,
            config,
            inner: Mutex::new(Inner {
                groups,
                dir: directory,
                owner,
                retiring: HashMap::new(),
                collected: HashSet::new(),
                dropped,
                busy_groups: HashSet::new(),
                busy_cold: HashSet::new(),
                steps_in_flight: 0,
                handed: HashSet::new(),
            }),
            readers: FileReaders::new(fs.clone(), config.prefetch_threads),
            appended_bytes: AtomicU64::new(0),
            total_bytes: AtomicU64::new(total),
            segments_in_use: AtomicU64::new(segments),
            cold_moved_bytes: AtomicU64::new(0),
            cold_handed_bytes: AtomicU64::new(0),
            cold_gc_runs: AtomicU64::new(0),
            splits: AtomicU64::new(0),
            random: AtomicU64::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
            ),
        };
        Ok((store, edit))
    }

    /// Makes each group's newest file from before the open its head again,
    /// in place of the file the open started, when that one is still empty
    /// (replay appended nothing to it) and the old one holds less than a log
    /// segment (`docs/design.md`, "Hash layout", *Opening*). Else
    /// every open would leave a small sealed file in every group it wrote
    /// to. The file system has no appending to an existing file, so the
    /// file is written anew, its whole records at the same offsets (which
    /// cuts a torn tail), synced, and renamed over the old: a crash leaves
    /// one or the other, with the same records. Appends go to it only once
    /// recovery has installed its manifest, so no journaled pointer that
    /// replay found lost can name them. The open's empty file leaves the
    /// open's edit (`edit`) and is deleted after the open.
    pub(crate) fn continue_small_heads(&self, edit: &mut VersionEdit) -> Result<()> {
        // (group id, old head, its length, the open's new head)
        let candidates: Vec<(u32, u64, u64, u64)> = {
            let inner = self.inner.lock();
            let n = inner.hash_groups();
            (inner.groups.iter().enumerate())
                .filter_map(|(i, g)| {
                    let newest = g.newest_at_open?;
                    let &(last, len) = g.sealed.last()?;
                    let small = len < self.config.log_segment_bytes;
                    let unused = g.head.len() <= FILE_HEADER_LEN as u64;
                    (last == newest && small && unused)
                        .then(|| (group_id(i, n), last, len, g.head.number()))
                })
                .collect()
        };
        let mut renamed = false;
        for (g, file, len, new_head) in candidates {
            let cold = g == COLD_GROUP;
            let Some(head) = self.rewrite_for_appends(file, store_id(cold))? else {
                continue;
            };
            renamed = true;
            let mut inner = self.inner.lock();
            let i = inner.index(g);
            let group = &mut inner.groups[i];
            debug_assert_eq!(group.head.number(), new_head, "no GC runs in recovery");
            debug_assert_eq!(group.sealed.last().map(|e| e.0), Some(file));
            let segments = segments_of(group, &self.config);
            group.sealed.pop();
            let unused = std::mem::replace(&mut group.head, head);
            // Records from before the open: whether all are first versions
            // is not known.
            group.head_first_only = false;
            let now = group.head.len();
            self.resize(segments, segments_of(group, &self.config));
            self.total_bytes
                .fetch_sub(len - now + unused.len(), Ordering::Relaxed);
            inner.owner.remove(&new_head);
            inner.dropped.push(new_head);
            edit.values.hash.added.retain(|&(_, f)| f != new_head);
        }
        if renamed {
            self.fs.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// A writer that continues file `file` (of pointers with store id
    /// `store`): its whole records written anew to a temporary file, at the
    /// offsets they had, synced, and renamed over it. `None` when the file
    /// holds damage (not just a torn tail): it stays sealed, for `verify`.
    fn rewrite_for_appends(&self, file: u64, store: u8) -> Result<Option<VlogWriter>> {
        let path = self.file_path(file);
        let data = self.fs.read_all(&path, IoClass::ValueStore)?;
        let scan = match scan_file(&data, &path) {
            Ok(scan) if scan.damage.is_none() => scan,
            _ => return Ok(None),
        };
        let tmp = filename::temp(&self.dir, self.file_numbers.fetch_add(1, Ordering::SeqCst));
        let f = self.fs.create(&tmp, IoClass::ValueStore)?;
        let mut head = VlogWriter::for_store(f, file, self.config.batch_bytes, store);
        for (offset, record_len, r) in &scan.records {
            let p = head.append(&Record {
                seq: r.seq,
                flags: r.flags,
                key: &r.key,
                value: &r.value,
            })?;
            // One encoding: the same records land where they were.
            assert_eq!(
                (p.offset, p.record_len),
                (*offset, *record_len),
                "a record written anew moved"
            );
        }
        head.sync()?;
        self.fs.rename(&tmp, &path)?;
        self.readers.forget(file);
        Ok(Some(head))
    }

    /// Each group's newest file from before the open, with its length,
    /// where it is still sealed (not continued as the head): the files a
    /// killed process may have left torn and unsynced.
    fn sealed_from_before_open(&self) -> Vec<(u64, u64)> {
        let inner = self.inner.lock();
        (inner.groups.iter())
            .filter_map(|g| {
                let n = g.newest_at_open?;
                g.sealed.iter().find(|&&(f, _)| f == n).copied()
            })
            .collect()
    }

    /// Cuts a torn tail off each group's newest file from before the open
    /// (recovery, once replay is done; see [`cut_torn_tail`]): the only
    /// files a crash may have cut short.
    pub(crate) fn cut_torn_tails(&self) -> Result<()> {
        for (file, len) in self.sealed_from_before_open() {
            let tmp = self.file_numbers.fetch_add(1, Ordering::SeqCst);
            if let Some(cut) = cut_torn_tail(self, &self.fs, file, len, 0, tmp)? {
                let mut inner = self.inner.lock();
                let found = inner.owner.get(&file).map(|&g| inner.index(g));
                if let Some(entry) =
                    found.and_then(|i| inner.groups[i].sealed.iter_mut().find(|e| e.0 == file))
                {
                    entry.1 = cut;
                }
                self.total_bytes.fetch_sub(len - cut, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Starts each group's greedy count from the garbage its files from
    /// before the open are known to hold (`garbage`: bytes per file): the
    /// bytes written since its last GC, which the count stands for, were
    /// counted in memory by the runs before and are lost at every open. A
    /// group that earlier runs filled with garbage would otherwise rank
    /// below every group written to since the open, and never be collected
    /// by a database that restarts more often than it writes a group full.
    pub(crate) fn count_garbage_as_written(&self, garbage: &BTreeMap<u64, u64>) {
        let mut inner = self.inner.lock();
        for g in &mut inner.groups {
            let known: u64 = (g.sealed.iter().map(|&(f, _)| f))
                .chain(std::iter::once(g.head.number()))
                .map(|f| garbage.get(&f).copied().unwrap_or(0))
                .sum();
            g.written_since_gc += known;
        }
    }

    /// The hash group GC collects before any other: of those over their
    /// file budget ([`Group::over_file_budget`]) and in no step, the one
    /// with the most sealed files.
    pub(crate) fn over_budget_group(&self) -> Option<u32> {
        let inner = self.inner.lock();
        inner.groups[..inner.hash_groups()]
            .iter()
            .enumerate()
            .filter(|(i, g)| {
                !inner.busy_groups.contains(&(*i as u32))
                    && g.over_file_budget(self.config.log_segment_bytes)
            })
            .max_by_key(|(i, g)| (g.sealed.len(), std::cmp::Reverse(*i)))
            .map(|(i, _)| i as u32)
    }

    /// Sealed cold log files that one GC step merges into the cold log's
    /// head: those below half a cold file ([`HashConfig::cold_file_bytes`]),
    /// oldest first, until they make a cold file, when there are two or
    /// more (empty otherwise). An open seals the cold log's head however
    /// little GC wrote to it, and a cold file without garbage is never a
    /// victim otherwise (`docs/design.md`, "Hash layout", *Files per
    /// group*).
    pub(crate) fn small_cold_files(&self) -> Vec<(u64, u64)> {
        let Some(cold_file_bytes) = self.config.cold_file_bytes else {
            return Vec::new();
        };
        let inner = self.inner.lock();
        let small: Vec<(u64, u64)> = (inner.cold().sealed.iter().copied())
            .filter(|&(f, len)| len < cold_file_bytes / 2 && !inner.busy_cold.contains(&f))
            .collect();
        if small.len() < 2 {
            return Vec::new();
        }
        let mut bytes = 0;
        let mut out = Vec::new();
        for (f, len) in small {
            if out.len() >= 2 && bytes >= cold_file_bytes {
                break;
            }
            bytes += len;
            out.push((f, len));
        }
        out
    }

    /// Deletes the empty files this open dropped, once the manifest no
    /// longer lists them.
    pub(crate) fn remove_dropped(&self) {
        let dropped = std::mem::take(&mut self.inner.lock().dropped);
        for n in dropped {
            // A failed delete leaves an unlisted file the next open removes.
            let _ = self.fs.remove(&filename::value_segment(&self.dir, n));
        }
    }

    /// The GC victim among groups holding records, by the configured
    /// policy (`crate::policy`; greedy by default, HashKV, USENIX ATC '18, §3.3).
    #[cfg(test)]
    pub(crate) fn victim(&self, garbage: &BTreeMap<u64, u64>) -> Option<u32> {
        self.victim_candidate(garbage).map(|c| c.group)
    }

    /// `HashStore::victim`, with its size and known garbage.
    pub(crate) fn victim_candidate(&self, garbage: &BTreeMap<u64, u64>) -> Option<GroupCandidate> {
        let candidates: Vec<GroupCandidate> = {
            let inner = self.inner.lock();
            inner.groups[..inner.hash_groups()]
                .iter()
                .enumerate()
                .filter(|(i, _)| !inner.busy_groups.contains(&(*i as u32)))
                .filter(|(_, g)| g.written_since_gc > 0 || !g.sealed.is_empty())
                .map(|(i, g)| GroupCandidate {
                    group: i as u32,
                    bytes: g.bytes(),
                    written_since_gc: g.written_since_gc,
                    age_secs: g.last_gc.elapsed().as_secs_f64(),
                    garbage: g
                        .sealed
                        .iter()
                        .map(|&(f, _)| f)
                        .chain(std::iter::once(g.head.number()))
                        .map(|f| garbage.get(&f).copied().unwrap_or(0))
                        .sum(),
                })
                .collect()
        };
        let chosen = self
            .config
            .policy
            .choose(candidates.clone(), || self.next_random())?;
        candidates.into_iter().find(|c| c.group == chosen)
    }

    /// A pseudo-random number (splitmix64) for the greedy-random policy.
    fn next_random(&self) -> u64 {
        let mut z = self
            .random
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Creates the file that will become group `g`'s head once the
    /// manifest lists it ([`HashStore::switch_head`]).
    pub(crate) fn create_group_file(&self) -> Result<(u64, CountedWriter)> {
        let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
        let path = filename::value_segment(&self.dir, number);
        let f = self.fs.create(&path, IoClass::ValueStore)?;
        self.fs.sync_dir(&self.dir)?;
        Ok((number, f))
    }

    /// Makes `number` group `g`'s head; the files before it are frozen and
    /// returned (file, length), for GC to scan.
    pub(crate) fn switch_head(
        &self,
        g: u32,
        number: u64,
        f: CountedWriter,
    ) -> Result<Vec<(u64, u64)>> {
        let mut inner = self.inner.lock();
        self.switch_head_locked(&mut inner, g, number, f)
    }

    /// [`HashStore::switch_head`] under the store's lock.
    fn switch_head_locked(
        &self,
        inner: &mut Inner,
        g: u32,
        number: u64,
        f: CountedWriter,
    ) -> Result<Vec<(u64, u64)>> {
        let i = inner.index(g);
        inner.owner.insert(number, g);
        let group = &mut inner.groups[i];
        let segments = segments_of(group, &self.config);
        // Synced first, while it is still the head, like a log rotation:
        // only a group's newest file may end torn (recovery relies on it),
        // and a writer whose value is in it relies on this sync once it is
        // no longer a head (`sync` syncs heads only). If the sync fails,
        // nothing changes and the head fails every later sync.
        group.head.sync()?;
        let head = VlogWriter::for_store(f, number, self.config.batch_bytes, store_id(group.cold));
        let old = std::mem::replace(&mut group.head, head);
        group.sealed.push((old.number(), old.len()));
        if std::mem::replace(&mut group.head_first_only, !group.cold) {
            group.first_only.insert(old.number());
        }
        group.written_since_gc = 0;
        group.last_gc = Instant::now();
        self.total_bytes
            .fetch_add(group.head.len(), Ordering::Relaxed);
        self.resize(segments, segments_of(group, &self.config));
        let frozen = group.sealed.clone();
        Ok(frozen)
    }

    /// Creates `n` files for new group heads, with one directory sync.
    fn create_group_files(&self, n: usize) -> Result<Vec<(u64, CountedWriter)>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
            let path = filename::value_segment(&self.dir, number);
            out.push((number, self.fs.create(&path, IoClass::ValueStore)?));
        }
        self.fs.sync_dir(&self.dir)?;
        Ok(out)
    }

    /// Splits group `g` by `bits` more hash bits into `2^bits` groups (it
    /// and `2^bits - 1` new ones) and gives it a new head (`docs/design.md`,
    /// "Hash layout: elastic groups"). One manifest edit lists the splits
    /// and every new head before anything is written to them; then the
    /// directory routes keys to the new groups. Nothing is moved: `g`'s
    /// files before the new head are returned for its GC step, which copies
    /// each live record to its key's group.
    pub(crate) fn split_group(
        &self,
        host: &dyn GcHost,
        g: u32,
        bits: u32,
    ) -> Result<Vec<(u64, u64)>> {
        // Only GC splits, one step at a time: the next ids are free.
        let mut next = self.groups() as u32;
        let mut splits = Vec::new();
        let mut members = vec![g];
        for _ in 0..bits {
            for m in members.clone() {
                splits.push((m, next));
                members.push(next);
                next += 1;
            }
        }
        let mut files = self.create_group_files(1 + splits.len())?.into_iter();
        let (head, head_file) = files.next().expect("one file per head");
        let children: Vec<(u64, CountedWriter)> = files.collect();
        let mut edit = VersionEdit::default();
        edit.values.hash.splits.clone_from(&splits);
        edit.values.hash.added.push((g, head));
        for (&(_, child), &(number, _)) in splits.iter().zip(&children) {
            edit.values.hash.added.push((child, number));
        }
        host.install(edit)?;
        let mut inner = self.inner.lock();
        for (&(parent, child), (number, f)) in splits.iter().zip(children) {
            let made = inner.dir.split(parent);
            debug_assert_eq!(made, child, "split ids follow the manifest's");
            inner.owner.insert(number, child);
            let group = Group {
                cold: false,
                head: VlogWriter::for_store(f, number, self.config.batch_bytes, STORE_HASH),
                sealed: Vec::new(),
                newest_at_open: None,
                first_at_open: number,
                written_since_gc: 0,
                last_gc: Instant::now(),
                head_first_only: true,
                first_only: HashSet::new(),
            };
            self.total_bytes
                .fetch_add(group.head.len(), Ordering::Relaxed);
            let at = inner.hash_groups();
            inner.groups.insert(at, group);
        }
        self.splits
            .fetch_add(splits.len() as u64, Ordering::Relaxed);
        self.switch_head_locked(&mut inner, g, head, head_file)
    }

    /// Group `g`'s bytes not known to be garbage (`garbage`: bytes per
    /// file) in files other than `leaving`, and its split depth.
    pub(crate) fn live_estimate(
        &self,
        g: u32,
        garbage: &BTreeMap<u64, u64>,
        leaving: &[u64],
    ) -> (u64, u32) {
        let inner = self.inner.lock();
        let group = inner.group(g);
        let files = (group.sealed.iter().copied())
            .chain(std::iter::once((group.head.number(), group.head.len())))
            .filter(|(f, _)| !leaving.contains(f));
        let live = files
            .map(|(f, len)| len - garbage.get(&f).copied().unwrap_or(0).min(len))
            .sum();
        (live, inner.dir.shapes[g as usize].depth)
    }

    /// Bytes past which an elastic group is split (None: groups fixed).
    pub(crate) fn split_bytes(&self) -> Option<u64> {
        self.config.split_bytes
    }

    /// A reader of a frozen file (GC reads it in chunks).
    pub(crate) fn reader_of(&self, file: u64) -> Result<crate::fs::CountedReader> {
        self.readers.get(file, &self.file_path(file))
    }

    /// GC moved the live records of `files` out of group `g`: they leave
    /// the group but stay readable until [`HashStore::delete_retired`].
    pub(crate) fn retire(&self, g: u32, files: &[u64]) {
        let mut inner = self.inner.lock();
        let i = inner.index(g);
        let group = &mut inner.groups[i];
        let segments = segments_of(group, &self.config);
        let mut gone = Vec::new();
        group.sealed.retain(|&(n, len)| {
            let out = files.contains(&n);
            if out {
                gone.push((n, len));
            }
            !out
        });
        group.first_only.retain(|n| !files.contains(n));
        self.resize(segments, segments_of(group, &self.config));
        for (n, len) in gone {
            inner.retiring.insert(n, (g, len));
            self.total_bytes.fetch_sub(len, Ordering::Relaxed);
        }
    }

    /// GC handed `files` from group `g` to the cold log whole (their
    /// records stay where they are; `docs/design.md`, "Hash layout",
    /// *Handing files to the cold log*), once the manifest says so.
    pub(crate) fn hand_to_cold(&self, g: u32, files: &[u64]) {
        let mut inner = self.inner.lock();
        let i = inner.index(g);
        let group = &mut inner.groups[i];
        let segments = segments_of(group, &self.config);
        let mut moved = Vec::new();
        group.sealed.retain(|&(n, len)| {
            let out = files.contains(&n);
            if out {
                moved.push((n, len));
            }
            !out
        });
        group.first_only.retain(|n| !files.contains(n));
        self.resize(segments, segments_of(group, &self.config));
        let cold = inner.hash_groups();
        for (n, len) in moved {
            let sealed = &mut inner.groups[cold].sealed;
            let at = sealed.partition_point(|&(f, _)| f < n);
            sealed.insert(at, (n, len));
            inner.owner.insert(n, COLD_GROUP);
            inner.handed.insert(n);
            self.cold_handed_bytes.fetch_add(len, Ordering::Relaxed);
        }
    }

    /// Of group `g`'s files (the head too with `with_head`), those GC
    /// hands to the cold log whole rather than collecting them: every
    /// record a first version, so every live one is cold (HashKV, USENIX ATC '18, §3.4;
    /// [`crate::policy::is_cold`]), and at most half of it known garbage,
    /// so that holding its garbage in the cold log costs less than copying
    /// its live records (`garbage`: bytes per file). Hotness awareness
    /// only.
    pub(crate) fn to_hand_over(
        &self,
        g: u32,
        with_head: bool,
        garbage: &BTreeMap<u64, u64>,
    ) -> Vec<u64> {
        if !self.hotness() || g == COLD_GROUP {
            return Vec::new();
        }
        let inner = self.inner.lock();
        let group = inner.group(g);
        let head =
            (with_head && group.head_first_only).then(|| (group.head.number(), group.head.len()));
        (group.sealed.iter().copied())
            .filter(|(f, _)| group.first_only.contains(f))
            .chain(head)
            .filter(|&(f, len)| {
                let dead = garbage.get(&f).copied().unwrap_or(0);
                len > FILE_HEADER_LEN as u64 && dead.saturating_mul(2) <= len
            })
            .map(|(f, _)| f)
            .collect()
    }

    /// True if cold log file `file` was handed over from a group in this
    /// open.
    pub(crate) fn was_handed(&self, file: u64) -> bool {
        self.inner.lock().handed.contains(&file)
    }

    /// Deletes retired files once no reader can need them.
    pub(crate) fn delete_retired(&self, files: &[u64]) {
        {
            let mut inner = self.inner.lock();
            for n in files {
                inner.retiring.remove(n);
                inner.owner.remove(n);
                inner.collected.insert(*n);
            }
        }
        for &n in files {
            self.readers.forget(n);
            // A failed delete leaves an unlisted file the next open removes.
            let _ = self.fs.remove(&filename::value_segment(&self.dir, n));
        }
    }

    /// Log segments of the reserve, when a capacity is set.
    pub(crate) fn reserve_segments(&self) -> Option<u64> {
        self.config.reserve_segments
    }

    /// Records that a group went from `before` to `after` log segments.
    fn resize(&self, before: u64, after: u64) {
        if after >= before {
            self.segments_in_use
                .fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.segments_in_use
                .fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Number of segment groups.
    pub(crate) fn groups(&self) -> usize {
        self.inner.lock().hash_groups()
    }

    /// True when GC moves cold values to the cold log.
    pub(crate) fn hotness(&self) -> bool {
        self.config.cold_file_bytes.is_some()
    }

    /// Appends a GC copy of a cold value to the cold log.
    pub(crate) fn append_cold(&self, r: &Record<'_>) -> Result<ValuePointer> {
        let mut inner = self.inner.lock();
        let i = inner.hash_groups();
        self.append_to(&mut inner.groups[i], r)
    }

    /// Appends to `group`'s head, keeping the byte and segment counts.
    fn append_to(&self, group: &mut Group, r: &Record<'_>) -> Result<ValuePointer> {
        let before = group.head.len();
        let segments = segments_of(group, &self.config);
        let p = group.head.append(r)?;
        if r.flags & FLAG_FIRST_VERSION == 0 {
            group.head_first_only = false;
        }
        let grown = group.head.len() - before;
        group.written_since_gc += grown;
        self.resize(segments, segments_of(group, &self.config));
        self.appended_bytes
            .fetch_add(u64::from(p.record_len), Ordering::Relaxed);
        self.total_bytes.fetch_add(grown, Ordering::Relaxed);
        Ok(p)
    }

    /// True when the cold log's head has reached its size: GC starts a new
    /// one (listed in the manifest first) before it appends more.
    pub(crate) fn cold_head_full(&self) -> bool {
        let inner = self.inner.lock();
        self.config
            .cold_file_bytes
            .is_some_and(|limit| inner.cold().head.len() >= limit)
    }

    /// The cold log head's file number.
    pub(crate) fn cold_head(&self) -> u64 {
        self.inner.lock().cold().head.number()
    }

    /// True while a GC step is frozen and not yet done.
    pub(crate) fn steps_in_flight(&self) -> bool {
        self.inner.lock().steps_in_flight > 0
    }

    /// Marks cold log files busy: no victim until released.
    pub(crate) fn hold_cold(&self, files: &[u64]) {
        self.inner.lock().busy_cold.extend(files);
    }

    /// Ends what [`HashStore::hold_cold`] began.
    pub(crate) fn release_cold(&self, files: &[u64]) {
        self.inner.lock().release_cold(files);
    }

    /// Marks a step's groups busy and counts it in flight until it is done
    /// (its cold log files are held apart, `hold_cold`).
    pub(crate) fn begin_step(&self, groups: &[u32]) {
        let mut inner = self.inner.lock();
        inner.busy_groups.extend(groups);
        inner.steps_in_flight += 1;
    }

    /// Ends what [`HashStore::begin_step`] began, and releases the step's
    /// cold log files.
    pub(crate) fn end_step(&self, groups: &[u32], cold: &[u64]) {
        let mut inner = self.inner.lock();
        for g in groups {
            inner.busy_groups.remove(g);
        }
        inner.release_cold(cold);
        inner.steps_in_flight -= 1;
    }

    /// Groups by fill (bytes ÷ main segment) in tenths; the last bucket
    /// counts groups past their main segment.
    pub(crate) fn fill_histogram(&self) -> [u64; 11] {
        let inner = self.inner.lock();
        let mut h = [0; 11];
        for g in &inner.groups[..inner.hash_groups()] {
            let tenth = g.bytes() * 10 / self.config.main_segment_bytes.max(1);
            h[tenth.min(10) as usize] += 1;
        }
        h
    }

    /// Bytes of the cold log's files.
    pub(crate) fn cold_bytes(&self) -> u64 {
        self.inner.lock().cold().bytes()
    }

    /// Known garbage in the cold log's files (`garbage`: bytes per file).
    pub(crate) fn cold_garbage(&self, garbage: &BTreeMap<u64, u64>) -> u64 {
        let inner = self.inner.lock();
        let cold = inner.cold();
        (cold.sealed.iter().map(|&(f, _)| f))
            .chain(std::iter::once(cold.head.number()))
            .map(|f| garbage.get(&f).copied().unwrap_or(0))
            .sum()
    }

    /// The sealed cold log file with the most known garbage (`garbage`:
    /// bytes per file, from flushes and compactions that dropped pointers),
    /// as (file, length, garbage). Any file may be collected, not just the
    /// oldest: each is listed in the manifest on its own.
    pub(crate) fn cold_victim(&self, garbage: &BTreeMap<u64, u64>) -> Option<(u64, u64, u64)> {
        let inner = self.inner.lock();
        inner
            .cold()
            .sealed
            .iter()
            .filter(|(f, _)| !inner.busy_cold.contains(f))
            .map(|&(f, len)| (f, len, garbage.get(&f).copied().unwrap_or(0)))
            .max_by_key(|&(_, _, g)| g)
    }

    /// Log segments of the reserve in use: each group's bytes beyond its
    /// main segment, in whole log segments.
    pub(crate) fn log_segments_in_use(&self) -> u64 {
        self.segments_in_use.load(Ordering::Relaxed)
    }

    /// [`ValueStore::sync`] of the dirty heads whose file numbers `which`
    /// accepts. Buffers are written out under the store's lock; the fsyncs
    /// (about 3.5 ms each here, and a memtable flush leaves many groups
    /// dirty) run outside it, so appends, reads and GC go on meanwhile. A
    /// head counts as synced only once its fsync returned, so a concurrent
    /// caller syncs it too rather than returning early.
    fn sync_heads(&self, which: impl Fn(u64) -> bool) -> Result<()> {
        let pending = {
            let mut inner = self.inner.lock();
            let mut pending = Vec::new();
            for g in inner.groups.iter_mut() {
                if g.head.is_dirty() && which(g.head.number()) {
                    let (syncer, len) = g.head.begin_sync()?;
                    pending.push((g.head.number(), syncer, len));
                }
            }
            pending
        };
        // In parallel: each head is its own file, and the file system
        // commits concurrent fsyncs together.
        let failed: Vec<(u64, Error)> =
            (crate::parallel::in_parts(&pending, PARALLEL_HEAD_SYNCS, |piece, _| {
                (piece.iter())
                    .filter_map(|(number, syncer, _)| syncer.sync().err().map(|e| (*number, e)))
                    .collect::<Vec<_>>()
            }))
            .into_iter()
            .flatten()
            .collect();
        if !failed.is_empty() {
            let mut inner = self.inner.lock();
            for (number, _) in &failed {
                // The unsynced bytes may be gone; a later sync must not
                // vouch for them.
                if let Some(g) = inner.by_head(*number) {
                    g.head.sync_failed();
                }
            }
            return Err(failed.into_iter().next().expect("one failed").1);
        }
        let mut inner = self.inner.lock();
        for (number, _, len) in pending {
            // A head switched meanwhile was synced by the switch.
            if let Some(g) = inner.by_head(number) {
                g.head.end_sync(len);
            }
        }
        Ok(())
    }
}

impl RecordFiles for HashStore {
    fn locate(&self, p: &ValuePointer, key: &[u8]) -> Result<Located> {
        let path = || self.file_path(p.file);
        if p.store != STORE_HASH && p.store != STORE_COLD {
            return Err(Error::corruption(
                path(),
                p.offset,
                format!("pointer to value store {} in the hash layout", p.store),
            ));
        }
        let inner = self.inner.lock();
        let Some(g) = inner.owner.get(&p.file).map(|&g| inner.index(g)) else {
            if inner.collected.contains(&p.file) {
                return Ok(Located::Collected);
            }
            return Err(Error::corruption(
                path(),
                p.offset,
                "pointer into a segment group file that does not exist",
            ));
        };
        // A group's pointer may name a cold log file: GC hands files
        // whose live records are all cold to the cold log whole.
        let handed_over = inner.groups[g].cold && p.store == STORE_HASH;
        if inner.groups[g].cold != (p.store == STORE_COLD) && !handed_over {
            return Err(Error::corruption(
                path(),
                p.offset,
                format!(
                    "pointer to value store {} into another store's file",
                    p.store
                ),
            ));
        }
        if let Some(&(_, len)) = inner.retiring.get(&p.file) {
            drop(inner);
            check_within(p, len, path)?;
            return Ok(Located::InFile { limit: len });
        }
        let group = &inner.groups[g];
        let limit = if group.head.number() == p.file {
            if let Some(raw) = group.head.read_buffered(p.offset, p.record_len as usize) {
                return check_record(&raw, p, key, &path()).map(Located::Buffered);
            }
            group.head.written()
        } else {
            group
                .sealed
                .iter()
                .find(|&&(n, _)| n == p.file)
                .map(|&(_, len)| len)
                .expect("owned files are the group's")
        };
        check_within(p, limit, path)?;
        Ok(Located::InFile { limit })
    }

    fn is_collected(&self, file: u64) -> bool {
        self.inner.lock().collected.contains(&file)
    }

    fn file_path(&self, file: u64) -> PathBuf {
        filename::value_segment(&self.dir, file)
    }

    fn readers(&self) -> &FileReaders {
        &self.readers
    }
}

impl ValueStore for HashStore {
    fn append(&self, r: &Record<'_>) -> Result<ValuePointer> {
        let mut inner = self.inner.lock();
        let g = inner.dir.route(r.key);
        self.append_to(&mut inner.groups[g as usize], r)
    }

    /// Makes every record appended before the call durable
    /// ([`HashStore::sync_heads`]).
    fn sync(&self) -> Result<()> {
        self.sync_heads(|_| true)
    }

    /// Only the heads among `files`: a file that is no longer a head was
    /// synced when its group switched heads (`switch_head_locked`). A GC
    /// step's copies go to a few heads, while the flush and the writers
    /// leave most heads dirty at any moment (64 groups and more).
    fn sync_files(&self, files: &[u64]) -> Result<()> {
        self.sync_heads(|number| files.contains(&number))
    }

    /// A record past the end of its group's newest file from before this
    /// open was lost in the crash (groups are synced before the journal);
    /// past the end of an older file, or in another group's file, it is
    /// corruption.
    fn check_recovered(&self, p: &ValuePointer, key: &[u8]) -> Result<PointerCheck> {
        let path = self.file_path(p.file);
        let (len, may_be_torn) = {
            let inner = self.inner.lock();
            // Cold log pointers come only from GC, which syncs its copies
            // before their relocations are journaled: a file no list has
            // was collected, and a short file is damage.
            let g = if p.store == STORE_COLD {
                COLD_GROUP
            } else {
                inner.dir.route(key)
            };
            let group = inner.group(g);
            // A key's record sits in its group's files or, after splits,
            // in those of a group it was split from; or in a file GC
            // handed from one of those to the cold log.
            let may_hold = |owner: u32| {
                owner == g
                    || (g != COLD_GROUP && (owner == COLD_GROUP || inner.dir.may_hold(owner, g)))
            };
            match inner.owner.get(&p.file).copied() {
                Some(owner) if !may_hold(owner) => {
                    return Err(Error::corruption(
                        &path,
                        p.offset,
                        format!("key of group {g} points into a file of group {owner}"),
                    ))
                }
                Some(owner) => {
                    let group = inner.group(owner);
                    let len = group.sealed.iter().find(|&&(n, _)| n == p.file);
                    (
                        len.map(|&(_, l)| l),
                        !group.cold && group.may_be_torn(p.file),
                    )
                }
                None if group.cold
                    || inner.collected.contains(&p.file)
                    || p.file < group.first_at_open =>
                {
                    return Ok(PointerCheck::Collected)
                }
                None => (None, group.may_be_torn(p.file)),
            }
        };
        match len {
            Some(len) if p.offset.saturating_add(u64::from(p.record_len)) <= len => self
                .read(p, key, IoClass::Journal)
                .map(|_| PointerCheck::Valid),
            _ if may_be_torn => Ok(PointerCheck::Lost),
            _ => Err(Error::corruption(
                &path,
                p.offset,
                "journaled pointer past the end of a segment group file",
            )),
        }
    }

    fn file_count(&self) -> usize {
        let inner = self.inner.lock();
        inner.groups.iter().map(|g| g.sealed.len() + 1).sum()
    }

    /// A group's sealed files were synced when it switched heads
    /// (`switch_head_locked`).
    fn checkpoint_files(&self) -> Result<Vec<(u64, Option<u64>)>> {
        let mut inner = self.inner.lock();
        let mut out = Vec::new();
        for g in inner.groups.iter_mut() {
            g.head.write_out()?;
            out.extend(g.sealed.iter().map(|&(f, _)| (f, None)));
            out.push((g.head.number(), Some(g.head.written())));
        }
        Ok(out)
    }

    fn file_lengths(&self) -> Vec<(u64, u64)> {
        let inner = self.inner.lock();
        let mut out = Vec::new();
        for g in &inner.groups {
            out.extend(g.sealed.iter().copied());
            out.push((g.head.number(), g.head.len()));
        }
        out
    }

    fn live_files(&self) -> Vec<(u64, bool)> {
        let inner = self.inner.lock();
        let mut out = Vec::new();
        for g in &inner.groups {
            out.extend(g.sealed.iter().map(|&(f, _)| (f, true)));
            out.push((g.head.number(), false));
        }
        out
    }

    fn total_bytes(&self) -> u64 {
        self.total_bytes.load(Ordering::Relaxed)
    }

    fn appended_bytes(&self) -> u64 {
        self.appended_bytes.load(Ordering::Relaxed)
    }

    /// `None` once GC collected the file: a reader that listed it before
    /// (`verify`) may find it deleted. GC steps run from the open on when
    /// files piled up (*Files per group*), so `verify` right after an open
    /// met this (the crash suite: "value store file is missing").
    fn scan_start(&self, file: u64) -> Option<u64> {
        let collected = self.inner.lock().collected.contains(&file);
        (!collected).then_some(FILE_HEADER_LEN as u64)
    }

    fn layout_stats(&self, current: &Version, stats: &mut ValueStats) {
        stats.hash.groups = self.groups();
        stats.hash.splits = self.splits.load(Ordering::Relaxed);
        stats.hash.log_segments_in_use = self.log_segments_in_use();
        stats.hash.group_fill = self.fill_histogram();
        stats.hash.cold_log_bytes = self.cold_bytes();
        stats.hash.cold_garbage_bytes = self.cold_garbage(&current.values.garbage);
        stats.hash.cold_moved_bytes = self.cold_moved_bytes.load(Ordering::Relaxed);
        stats.hash.cold_handed_bytes = self.cold_handed_bytes.load(Ordering::Relaxed);
        stats.hash.cold_gc_runs = self.cold_gc_runs.load(Ordering::Relaxed);
    }

    /// Full when no log segment of the reserve is free, or the files
    /// (cold log included) have reached the capacity.
    fn is_full(&self, capacity: u64) -> bool {
        self.reserve_segments()
            .is_some_and(|r| self.log_segments_in_use() >= r)
            || self.total_bytes() >= capacity
    }
}

impl ValueRecovery for HashStore {
    /// Each group's newest file from before the open, where it is still
    /// sealed (one continued as the head was rewritten and synced): the
    /// killed process's heads, which nothing synced since.
    fn sync_from_before_open(&self, _current: &Version) -> Result<()> {
        for (file, _) in self.sealed_from_before_open() {
            self.fs.sync_file(&self.file_path(file))?;
        }
        Ok(())
    }

    fn after_replay(&self, current: &Version, edit: &mut VersionEdit) -> Result<()> {
        self.continue_small_heads(edit)?;
        self.cut_torn_tails()?;
        self.count_garbage_as_written(&current.values.garbage);
        Ok(())
    }

    fn after_open(&self) {
        self.remove_dropped();
    }
}

impl ValueAccounting for HashStore {}

impl ValueGc for HashStore {
    fn gc_profile(&self) -> GcProfile {
        GcProfile {
            needs_barrier: true,
            // A record a flush appended to a victim before its tables are
            // installed is the version the index holds inline (in the
            // memtable being flushed): GC takes it for live by its
            // sequence number (`Newest::Inline`), so a step does not wait
            // for the flush.
            waits_for_flushes: false,
            // A step in flight keeps its group, the groups split from it,
            // or its cold log file busy, and a cold log head sealed while
            // it was in flight (its cold copies may be there) from being a
            // victim until it is done: keys route to one group, so two
            // steps never move the same key.
            overlaps_steps: true,
            // Its validity lookups take a fresh view per chunk of keys.
            looks_up_fresh: true,
            judges_durable_only: false,
            finds_garbage: true,
            // A step drops every frozen file of its group (or its cold log
            // file), and the manifest drops the counts of files no group
            // lists.
            frees_whole: true,
            counts_refs: false,
        }
    }

    fn gc_victim<'a>(&'a self, host: &dyn GcHost) -> Result<Option<Box<dyn GcVictim + 'a>>> {
        Ok(self
            .gc_victim_hash(host)?
            .map(|v| -> Box<dyn GcVictim + 'a> { v }))
    }

    fn gc_victim_overlapping<'a>(
        &'a self,
        host: &dyn GcHost,
    ) -> Result<Option<Box<dyn GcVictim + Send + 'a>>> {
        self.gc_victim_hash(host)
    }

    fn gc_wanted(&self, t: &GcTrigger<'_>) -> bool {
        self.gc_wanted_hash(t)
    }

    fn gc_over_capacity(&self, current: &Version, capacity: u64) -> bool {
        self.over_capacity_hash(current, capacity)
    }

    fn delete_collected(&self, files: &[u64]) {
        self.delete_retired(files);
    }

    fn gc_has_victim(&self, current: &Version) -> bool {
        self.gc_target_exists(current)
    }
}

#[cfg(test)]
mod tests;
