//! Lazy-read GC of value tables (Scavenger, VLDB, §3.2.2, Fig. 8; `docs/design.md`,
//! "Table layout").
//!
//! A step picks victims by garbage ratio from the exact accounting, the
//! most garbage first and hot tables first at equal ratios (§3.4.2; see
//! `store::candidates` for why not strictly hot first), from `gc_ratio` (the paper's 0.2) or, under space
//! pressure, from `store::PRESSURE_RATIO` (§3.5: "lowering the garbage ratio
//! threshold"). It reads each victim's dense index in one read, judges
//! every record (by the notes of its counted garbage when they add up to
//! the count, else the DropCache first, then the key's newest index entry),
//! reads only the live records, coalescing nearby ones, and writes them in
//! key order to new hot and cold tables. The edit removes the victims, adds
//! the outputs and records the inheritance edges; the index is not
//! touched, so no relocation goes through the write path.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;
use rayon::prelude::*;

use super::meta::{KeyRange, TableFile};
use super::reader::{CoalescedReader, IndexEntry, ValueTable, MAX_COALESCED_READ};
use super::store::{candidates, Frozen, PendingTable, TableStore, TableWriter};
use crate::error::Result;
use crate::fs::IoClass;
use crate::gc::drop_cache::DropCache;
use crate::gc::{Collected, Committed, GcHost, GcVictim, Relocation, SeenView};
use crate::pointer::ValuePointer;
use crate::record::{Record, KIND_PUT};
use crate::table::reader::SortedProbes;
use crate::version::{Version, VersionEdit};

/// Most victims of one step.
const MAX_VICTIMS: usize = 8;

/// Live records closer than this are read with one read (Scavenger, VLDB,
/// §3.2.2 coalesces "adjacent" valid records; 64 KiB keeps a read of a
/// mostly live run to one request without reading much garbage).
const COALESCE_GAP_BYTES: u64 = 64 << 10;

/// What the victim cursors of one step may hold in memory together: each
/// reads runs of up to this share (between [`MIN_VICTIM_READ_BYTES`] and
/// `MAX_COALESCED_READ`, 4 MiB), so that a step of eight victims holds
/// 8 MiB of runs rather than 32 (issue 53's memory bound: GC's buffers
/// counted and bounded).
const VICTIM_READS_BYTES: u64 = 8 << 20;

/// Shortest run a victim cursor is held to, so that a step of many
/// victims still reads a mostly live one in requests of a megabyte (not
/// measured apart from the bound: the update benchmark's CPU per update
/// did not move, `docs/experiments.md`, "Value table GC's read buffers,
/// bounded").
const MIN_VICTIM_READ_BYTES: u64 = 1 << 20;

/// Keys judged per task on the GC threads.
const JUDGE_CHUNK: usize = 512;

/// What GC decided about a record from its index entry. The live verdicts
/// carry the pointer that entry holds (a relocation's old pointer, with
/// write-back), and whether the key is hot (the DropCache holds it: its
/// copy goes to the hot output), learnt from the judging's lookup in the
/// cache so that the copy need not look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Dead,
    Live {
        pointer: ValuePointer,
        hot: bool,
    },
    /// The key's newest entry names a collected table whose heir may be
    /// this one: live if the record's checksum is the pointer's.
    LiveIfCrc {
        pointer: ValuePointer,
        hot: bool,
    },
    /// Not among the records the victim's garbage counts name, which add up
    /// to its count: live, judged with no lookup (never with write-back, so
    /// no relocation needs the entry's pointer).
    Counted {
        hot: bool,
    },
}

/// A victim's noted garbage ([`super::store::GarbageNotes`]) as a step
/// judges by it: the offsets sorted, and whether they are all of the
/// victim's counted garbage.
struct Notes {
    offsets: Vec<u32>,
    complete: bool,
}

impl TableStore {
    /// The records of the tables a GC step with write-back left pending
    /// (a crash or failure between listing its outputs and its end), to
    /// recount: (table, its records' bytes, and each record's key, offset
    /// and length).
    pub(super) fn pending_records(&self, current: &Version) -> Result<Vec<PendingTable>> {
        let mut out = Vec::new();
        for &n in &current.values.table.pending {
            let t = self.table(n).ok_or_else(|| {
                crate::error::Error::corruption(
                    crate::filename::value_table(&self.dir, n),
                    0,
                    "a pending value table the manifest lists is not open",
                )
            })?;
            let (entries, _) = t.index_entries(IoClass::Gc)?;
            let bytes = t.record_bytes();
            let records = entries
                .into_iter()
                .map(|e| (e.key, e.handle.offset, e.handle.len))
                .collect();
            out.push(PendingTable {
                number: n,
                bytes,
                records,
            });
        }
        Ok(out)
    }

    /// Picks and freezes the victims of a step: by preference (garbage
    /// ratio, then hot first; see [`candidates`]) while their live bytes
    /// fit half a table, so that small victims are merged into one output.
    pub(super) fn pick_victims<'a>(
        &'a self,
        host: &dyn GcHost,
    ) -> Result<Option<Box<dyn GcVictim + 'a>>> {
        let current = host.current();
        let ratio = self.gc_ratio(host.under_space_pressure());
        let _accounting = self.accounting.lock();
        let mut inner = self.inner.write();
        let frozen: HashSet<u64> = inner.frozen.keys().copied().collect();
        let garbage = &current.values.garbage;
        let budget = self.config.file_bytes / 2;
        let mut victims = Vec::new();
        let mut live_sum = 0u64;
        let mut order = candidates(&current, &frozen);
        if self.config.cost_benefit {
            by_cost_benefit(&mut order);
        }
        for (f, t, r) in order {
            if r < ratio || !inner.live.contains_key(&f) {
                continue;
            }
            let live = t
                .record_bytes
                .saturating_sub(garbage.get(&f).copied().unwrap_or(0));
            if !victims.is_empty() && live_sum + live > budget {
                continue;
            }
            victims.push(f);
            live_sum += live;
            if victims.len() >= MAX_VICTIMS || live_sum >= budget {
                break;
            }
        }
        if victims.is_empty() {
            return Ok(None);
        }
        for &v in &victims {
            inner.frozen.insert(v, Frozen::Picked);
        }
        Ok(Some(Box::new(TableVictim {
            store: self,
            victims,
            outputs: Vec::new(),
            keys: Vec::new(),
            guard: None,
            handed_over: false,
            listed: false,
            installed: false,
            judged: None,
            by_counts: Vec::new(),
            took_deferred: false,
        })))
    }

    /// Judges one record in `view` (see [`Verdict`]).
    fn judge(
        &self,
        host: &dyn GcHost,
        view: &SeenView,
        victim: u64,
        victims: &[u64],
        e: &IndexEntry,
    ) -> Result<Verdict> {
        // Victims are installed tables: their records are durable, so at or
        // below even a durable view. One above it would look dead (its own
        // entry unseen): recovery failed to move the durable sequence past
        // what it flushed once, and the crash test found it.
        debug_assert!(
            e.seq <= view.seq,
            "record {} of table {victim} above the view {}",
            e.seq,
            view.seq
        );
        // With write-back a record's sequence is no longer its entry's: the
        // cache's rule does not hold (`TableLayoutOptions::gc_write_back`).
        let newest_dropped = self.drop_cache.newest_dropped(&e.key);
        let hot = newest_dropped.is_some();
        if !self.config.write_back && DropCache::shadows(newest_dropped, e.seq, view.seq) {
            self.checked_by_drop_cache.fetch_add(1, Ordering::Relaxed);
            return Ok(Verdict::Dead);
        }
        self.checked_by_lookup.fetch_add(1, Ordering::Relaxed);
        let Some(p) = host.pointer_of(view, &e.key)? else {
            return Ok(Verdict::Dead);
        };
        if p.record_len != e.handle.len {
            return Ok(Verdict::Dead);
        }
        if p.file == victim {
            return Ok(if p.offset == e.handle.offset {
                Verdict::Live { pointer: p, hot }
            } else {
                Verdict::Dead
            });
        }
        let inner = self.inner.read();
        let named_live = inner.live.contains_key(&p.file) || victims.contains(&p.file);
        Ok(if named_live {
            // The newest entry points at another table's record.
            Verdict::Dead
        } else {
            Verdict::LiveIfCrc { pointer: p, hot }
        })
    }
}

/// The victims of one step.
struct TableVictim<'a> {
    store: &'a TableStore,
    victims: Vec<u64>,
    outputs: Vec<(u64, TableFile)>,
    /// The outputs' key ranges.
    keys: Vec<(u64, KeyRange)>,
    /// The accounting lock, from attributing deferred garbage until the
    /// step's edit is installed.
    guard: Option<MutexGuard<'a, ()>>,
    /// The step handed its edit over: the manifest may list the outputs
    /// even if installing it failed, so they are no longer deleted here.
    handed_over: bool,
    /// The outputs are in the manifest already (write-back lists them
    /// before the relocations).
    listed: bool,
    installed: bool,
    /// The victims, judged ([`GcVictim::judge`]).
    judged: Option<Vec<Judged>>,
    /// The victims judged by their garbage counts' notes alone.
    by_counts: Vec<u64>,
    /// The step took the counts jobs deferred to it: if it ends without
    /// installing, they are lost with it.
    took_deferred: bool,
}

impl TableVictim<'_> {
    /// Step 4: copies the live records of the judged victims to hot and
    /// cold tables in key order (newest version first), merging the
    /// victims' records through one [`CoalescedReader`] each, so that one
    /// coalesced read per victim is in memory rather than every live value
    /// of the step (up to half a table, and a value allocation each).
    /// Returns the bytes read and written, and for each copy its key, the
    /// pointer its key's entry held and where the copy is (the relocations
    /// of write-back). Tables finished before a failure are outputs too, so
    /// that the step's failure removes them.
    fn copy_live(&mut self, judged: &[Judged]) -> Result<Copied> {
        let store = self.store;
        let gap = if store.config.lazy_read {
            COALESCE_GAP_BYTES
        } else {
            u64::MAX
        };
        let max_read = (VICTIM_READS_BYTES / judged.len().max(1) as u64)
            .clamp(MIN_VICTIM_READ_BYTES, MAX_COALESCED_READ);
        let mut cursors: Vec<CoalescedReader<'_>> = judged
            .iter()
            .map(|j| {
                CoalescedReader::new(&j.table, &j.keep, gap, IoClass::Gc).with_max_read(max_read)
            })
            .collect();
        let mut w = TableWriter::new(store);
        let mut out = Copied::default();
        let r = (|| -> Result<()> {
            loop {
                // The victim whose next record comes first by internal key.
                let mut first: Option<(usize, &IndexEntry)> = None;
                for (i, c) in cursors.iter().enumerate() {
                    let Some(e) = c.peek() else { continue };
                    let earlier = first.is_none_or(|(_, f)| {
                        e.key.as_slice().cmp(&f.key).then(f.seq.cmp(&e.seq)).is_lt()
                    });
                    if earlier {
                        first = Some((i, e));
                    }
                }
                let Some((i, _)) = first else {
                    return Ok(());
                };
                let verdict = judged[i].verdicts[cursors[i].position()];
                let Some((_, crc, r)) = cursors[i].next()? else {
                    return Ok(());
                };
                let (old, hot) = match verdict {
                    Verdict::Live { pointer, hot } => (Some(pointer), hot),
                    Verdict::LiveIfCrc { pointer, hot } if pointer.record_crc == crc => {
                        (Some(pointer), hot)
                    }
                    Verdict::Counted { hot } => (None, hot),
                    _ => continue,
                };
                let rec = Record {
                    seq: r.seq,
                    flags: KIND_PUT,
                    key: r.key,
                    value: r.value,
                };
                let copy = w.add(&rec, hot)?;
                out.bytes_written += u64::from(copy.record_len);
                if let (true, Some(old)) = (store.config.write_back, old) {
                    out.moves.push(Relocation {
                        key: r.key.to_vec(),
                        old,
                        new: copy,
                    });
                }
            }
        })();
        out.bytes_read = cursors.iter().map(|c| c.bytes_read).sum();
        let r = r.and_then(|()| w.finish());
        self.outputs.append(&mut w.done);
        self.keys.append(&mut w.keys);
        r.map(|()| out)
    }

    /// The tables the victims' inheritance edges lead to: the outputs, or
    /// none with write-back. There the index names the copies, and an edge
    /// would lead a job that drops a victim's old pointer to count the live
    /// copy as garbage (GC then copied the same records over and over).
    fn heirs(&self) -> Vec<u64> {
        if self.store.config.write_back {
            Vec::new()
        } else {
            self.outputs.iter().map(|o| o.0).collect()
        }
    }

    /// Lists the outputs in the manifest before any index entry points at
    /// them (write-back), with them and the victims pending until the
    /// step's edit settles them. From here on a failure leaves them to the
    /// manifest: if the step does not end, the next open recounts the
    /// pending tables (`Core::recount_values`), so the copies the
    /// index does not name count as garbage.
    fn list_outputs(&mut self, host: &dyn GcHost) -> Result<()> {
        if self.outputs.is_empty() {
            return Ok(());
        }
        let mut edit = VersionEdit::default();
        edit.values.table.added = self.outputs.clone();
        edit.values.table.keys = self.keys.clone();
        edit.values.table.pending = self
            .outputs
            .iter()
            .map(|o| o.0)
            .chain(self.victims.iter().copied())
            .collect();
        self.handed_over = true;
        host.install(edit)?;
        self.listed = true;
        Ok(())
    }

    /// The output holding the record `p` of `key` (same length, and the
    /// sequence `seq` of its entry or else the same checksum), for garbage
    /// found in a victim while the step ran.
    fn output_holding(
        &self,
        p: &ValuePointer,
        key: &[u8],
        seq: u64,
    ) -> Result<Option<ValuePointer>> {
        let seq = self.store.record_seq(Some(seq));
        let mut found = Vec::new();
        for &(n, _) in &self.outputs {
            if let Some(t) = self.store.table(n) {
                found.extend(TableStore::copies_in(&t, p, key, seq, IoClass::Gc)?);
            }
        }
        self.store.pick_copy(found, seq.is_some(), IoClass::Gc)
    }
}

impl GcVictim for TableVictim<'_> {
    /// Steps 1-3: every record of every victim judged in `view`, before
    /// any value is read. Without write-back nothing after this looks into
    /// the view's memtables.
    fn judge(&mut self, host: &dyn GcHost, view: &SeenView) -> Result<bool> {
        let store = self.store;
        let mut notes: Vec<Option<Notes>> = Vec::new();
        {
            let _accounting = store.accounting.lock();
            // Read under the lock: no job installs garbage meanwhile, and
            // none into a frozen table after it.
            let current = host.current();
            let mut inner = store.inner.write();
            let judge_by_counts =
                store.config.judge_by_counts && store.notes_trusted.load(Ordering::Acquire);
            for v in &self.victims {
                inner.frozen.insert(*v, Frozen::JudgedAt(view.seq));
                notes.push(judge_by_counts.then(|| {
                    let counted = current.values.garbage.get(v).copied().unwrap_or(0);
                    let n = inner.notes.get(v);
                    Notes {
                        offsets: n.map(|n| n.offsets.clone()).unwrap_or_default(),
                        complete: n.map_or(0, |n| n.bytes) == counted,
                    }
                }));
            }
        }
        // Sorted with no lock held: the readers' `locate` takes `inner`.
        for n in notes.iter_mut().flatten() {
            n.offsets.sort_unstable();
            let len = n.offsets.len();
            n.offsets.dedup();
            // A record noted twice would be a count taken twice: judged by
            // lookups, whatever the sum says.
            n.complete &= n.offsets.len() == len;
        }
        self.by_counts = self
            .victims
            .iter()
            .zip(&notes)
            .filter(|(_, n)| n.as_ref().is_some_and(|n| n.complete))
            .map(|(&v, _)| v)
            .collect();
        let tables: Vec<Arc<ValueTable>> = self
            .victims
            .iter()
            .filter_map(|&v| store.table(v))
            .collect();
        // One victim after another: side by side on the GC threads, the
        // steps took as long and the flushes waited twice as long for the
        // two cores (Mixed workload at 2 GiB).
        let judged = tables
            .iter()
            .map(|t| {
                let i = self.victims.iter().position(|&v| v == t.number());
                let notes = i.and_then(|i| notes[i].as_ref());
                judge_table(store, &self.victims, host, view, t, notes)
            })
            .collect::<Result<Vec<Judged>>>()?;
        self.judged = Some(judged);
        Ok(!store.config.write_back)
    }

    fn collect(&mut self, host: &dyn GcHost, view: &SeenView) -> Result<Collected> {
        let store = self.store;
        if self.judged.is_none() {
            self.judge(host, view)?;
        }
        let judged = self.judged.take().expect("judged above");
        let index_bytes: u64 = judged.iter().map(|j| j.index_bytes).sum();
        let records = judged.iter().map(|j| j.records).sum();
        // 4. Copies in key order (newest version first), hot and cold.
        let copied = self.copy_live(&judged)?;
        drop(judged);
        store
            .gc_value_bytes
            .fetch_add(copied.bytes_read, Ordering::Relaxed);
        let (bytes_read, bytes_written) = (index_bytes + copied.bytes_read, copied.bytes_written);
        // With write-back, the outputs are listed, then the index points
        // at the copies: a crash after the relocations leaves no pointer
        // to an unlisted table (`docs/design.md`, "Table layout").
        let committed = if store.config.write_back {
            self.list_outputs(host)?;
            host.relocate(copied.moves, view)?
        } else {
            Committed::default()
        };
        // 5. Garbage jobs found in the victims meanwhile: a record GC judged
        // dead (its shadow is in the view) goes with its victim; one GC
        // kept is in an output now. A victim judged by its counts kept
        // every record they did not name, whatever the view held.
        let guard = store.accounting.lock();
        let deferred: Vec<_> = {
            let mut inner = store.inner.write();
            let (mine, rest) = std::mem::take(&mut inner.deferred)
                .into_iter()
                .partition(|d| self.victims.contains(&d.ptr.file));
            inner.deferred = rest;
            mine
        };
        self.took_deferred = !deferred.is_empty();
        let mut edit = VersionEdit::default();
        for d in deferred {
            // With write-back a record GC kept and the key then left is a
            // relocation the commit dropped: counted as its copy's garbage
            // (`Committed::dropped_copies`), never here.
            let judged_dead = d.shadow <= view.seq && !self.by_counts.contains(&d.ptr.file);
            if judged_dead || store.config.write_back {
                continue;
            }
            if let Some(q) = self.output_holding(&d.ptr, &d.key, d.seq)? {
                edit.values.garbage.push((q.file, u64::from(q.record_len)));
                edit.values.dead.push((q.file, q.offset, q.record_len));
            }
        }
        let heirs = self.heirs();
        let t = &mut edit.values.table;
        if self.listed {
            // The victims leave the pending set with the tables.
            t.settled = self.outputs.iter().map(|o| o.0).collect();
        } else {
            t.added = self.outputs.clone();
            t.keys = self.keys.clone();
        }
        t.removed = self.victims.clone();
        // Also without heirs: edges into a victim leave with it.
        t.inherited = self.victims.iter().map(|&v| (v, heirs.clone())).collect();
        self.guard = Some(guard);
        self.handed_over = true;
        Ok(Collected {
            moves: Vec::new(),
            committed,
            bytes_read,
            records,
            bytes_written,
            edit,
            frees: self.victims.clone(),
            release_to: None,
            frees_bytes: 0,
            copies_unsynced: false,
        })
    }

    fn installed(mut self: Box<Self>) {
        self.store.retire(&self.victims, &self.heirs());
        self.installed = true;
        self.guard = None;
    }
}

impl Drop for TableVictim<'_> {
    /// A step that failed: its victims stay, and its outputs go unless
    /// the edit listing them was handed over (a failed install may still
    /// have reached the manifest; the next open removes them if not).
    /// Garbage jobs deferred to it is counted by the next job that
    /// settles (or the close), as if the victims had never been frozen,
    /// unless the failure came after the step took it (then it is not
    /// counted).
    fn drop(&mut self) {
        if self.installed {
            return;
        }
        if self.took_deferred {
            // Counts lost with the step: the records they name are neither
            // counted nor noted, and judged by the notes they would be
            // copied as live for good. Lookups find them dead.
            self.store.distrust_notes();
        }
        let mut inner = self.store.inner.write();
        for v in &self.victims {
            inner.frozen.remove(v);
        }
        drop(inner);
        if !self.handed_over {
            for &(n, _) in &self.outputs {
                self.store.abandon(n);
            }
        }
    }
}

/// Orders GC candidates (table, entry, garbage ratio) by cost and benefit
/// (`TableLayoutOptions::gc_cost_benefit`; LFS's rule, with lazy read's
/// cost): the benefit is the share `g` freed, weighted by the table's age
/// (file numbers since it was written: the newest candidate is age 1),
/// since space an old table frees stays free while a young hot table is
/// still losing records; the cost is reading and writing the live share,
/// `2 (1 - g)`, plus its dense index (0.05). A table all garbage costs
/// only its index and goes first whatever its age. Ties keep the greedy
/// order.
///
/// Measured (Mixed workload at 2 GiB under memcap 512, the update phase):
/// greedy left the load's tables at 38-39% garbage with 1.3 GB between
/// them while it collected young hot tables at 40% as they got there; by
/// cost and benefit GC wrote 2.8 GB instead of 3.4 GB.
pub(super) fn by_cost_benefit(order: &mut [(u64, TableFile, f64)]) {
    let now = order.iter().map(|c| c.0).max().unwrap_or(0) + 1;
    let score = |c: &(u64, TableFile, f64)| {
        if c.2 >= 1.0 {
            return f64::INFINITY;
        }
        let age = (now - c.0) as f64;
        c.2 * age / (2.0 * (1.0 - c.2) + 0.05)
    };
    order.sort_by(|a, b| score(b).total_cmp(&score(a)));
}

/// One victim of a step, judged: the entries of its records that may be
/// live (all of them without lazy read), in offset order, with their
/// verdicts.
struct Judged {
    table: Arc<ValueTable>,
    keep: Vec<IndexEntry>,
    verdicts: Vec<Verdict>,
    index_bytes: u64,
    records: u64,
}

/// What [`TableVictim::copy_live`] did.
#[derive(Default)]
struct Copied {
    bytes_read: u64,
    bytes_written: u64,
    /// With write-back, the relocations to commit.
    moves: Vec<Relocation>,
}

/// Steps 1-3 of a step for the victim `t` (one of `victims`): its dense
/// index in one read, each record judged (on the GC threads when there
/// are some). Without lazy read (the ablation) every record is kept, to
/// be read whole; with it only those that may be live (Scavenger, VLDB, §3.2.2).
/// A record `notes` name is dead with no lookup; when they are the whole
/// count, every other record is live, also with none (`docs/design.md`,
/// "Judged by the counts").
fn judge_table(
    store: &TableStore,
    victims: &[u64],
    host: &dyn GcHost,
    view: &SeenView,
    t: &Arc<ValueTable>,
    notes: Option<&Notes>,
) -> Result<Judged> {
    let (entries, index_bytes) = t.index_entries(IoClass::Gc)?;
    store
        .gc_index_bytes
        .fetch_add(index_bytes, Ordering::Relaxed);
    let records = entries.len() as u64;
    let judge = |e: &IndexEntry| {
        if let Some(n) = notes {
            let noted =
                u32::try_from(e.handle.offset).is_ok_and(|o| n.offsets.binary_search(&o).is_ok());
            if noted || n.complete {
                store.checked_by_counts.fetch_add(1, Ordering::Relaxed);
                return Ok(if noted {
                    Verdict::Dead
                } else {
                    Verdict::Counted {
                        hot: store.drop_cache.newest_dropped(&e.key).is_some(),
                    }
                });
            }
        }
        store.judge(host, view, t.number(), victims, e)
    };
    let verdicts: Vec<Verdict> = match host.pool() {
        Some(pool) => pool
            .install(|| {
                entries
                    .par_chunks(JUDGE_CHUNK)
                    .map(|c| {
                        // A value table's entries are in key order.
                        let _sorted = SortedProbes::uncached();
                        c.iter().map(judge).collect::<Result<Vec<_>>>()
                    })
                    .collect::<Result<Vec<_>>>()
            })?
            .into_iter()
            .flatten()
            .collect(),
        None => {
            let _sorted = SortedProbes::uncached();
            entries.iter().map(judge).collect::<Result<_>>()?
        }
    };
    let (keep, verdicts) = if store.config.lazy_read {
        entries
            .into_iter()
            .zip(verdicts)
            .filter(|(_, v)| *v != Verdict::Dead)
            .unzip()
    } else {
        (entries, verdicts)
    };
    Ok(Judged {
        table: t.clone(),
        keep,
        verdicts,
        index_bytes,
        records,
    })
}
