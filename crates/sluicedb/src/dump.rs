//! Readable dumps of a database's files, for `sluice dump` (in the manner of
//! LevelDB's `ldb dump` and `sst_dump`): table entries, journal batches,
//! manifest edits and value store records, one per line. The file's kind
//! comes from its name (`docs/format/`). A dump prints everything it can
//! read; damage is reported as a line and then as the returned
//! `Corruption`, so a damaged file still shows what precedes the damage.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{CountingFs, IoClass, StdFs};
use crate::iter::InternalIterator;
use crate::journal::Control;
use crate::key::{self, Kind};
use crate::logfile::read_log;
use crate::pointer::ValuePointer;
use crate::record::kind_of;
use crate::table::reader::Table;
use crate::table::BlockCache;
use crate::value::log::reader::scan_file;
use crate::value::table::reader::ValueTable;
use crate::version::VersionEdit;

/// How [`dump_file`] prints keys and values.
#[derive(Debug, Clone, Copy, Default)]
pub struct DumpOptions {
    /// Keys and values as hex; otherwise printable ASCII with `\xNN`
    /// escapes.
    pub hex: bool,
    /// Print at most this many lines per file (entries, records, batches
    /// and a batch's operations, edits).
    pub limit: Option<u64>,
    /// Print at most this many bytes of each value (its length is always
    /// printed).
    pub max_value_bytes: usize,
}

/// Bytes for a dump line: hex, or printable ASCII with `\xNN` escapes.
pub fn escape(b: &[u8], hex: bool) -> String {
    let mut out = String::with_capacity(b.len() * 2);
    for &c in b {
        if hex {
            out.push_str(&format!("{c:02x}"));
        } else if (0x20..0x7f).contains(&c) && c != b'\\' {
            out.push(c as char);
        } else {
            out.push_str(&format!("\\x{c:02x}"));
        }
    }
    out
}

/// Writes a readable dump of the database file at `path` to `out`.
pub fn dump_file(path: &Path, opts: DumpOptions, out: &mut dyn Write) -> Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::InvalidArgument(format!("{}: not a file name", path.display())))?;
    if name == crate::db::light::BUFFER_FILE {
        return dump_write_buffer(path, opts, out);
    }
    if name == crate::db::light::IMAGE_FILE {
        return dump_clean_image(path, out);
    }
    let kind = filename::parse(name).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{}: not a database file (tables, journals, manifests, value files, hash index checkpoints, the lightkv write buffer and its clean shutdown image)",
            path.display()
        ))
    })?;
    let fs = CountingFs::new(Arc::new(StdFs));
    let io = |e: std::io::Error| Error::io("read", path, e);
    let mut d = Dumper {
        out,
        opts,
        printed: 0,
    };
    match kind {
        FileKind::Table(n) => {
            let size = std::fs::metadata(path).map_err(io)?.len();
            let cache = Arc::new(BlockCache::new(0));
            let t = Arc::new(Table::open(
                &fs,
                path.to_path_buf(),
                n,
                size,
                cache,
                IoClass::UserRead,
            )?);
            // The shape line does not count against the entry limit.
            writeln!(d.out, "{}", t.describe())
                .map_err(|e| Error::io("write", "dump output", e))?;
            let mut it = t.iter(IoClass::UserRead, false);
            it.seek_to_first();
            while it.valid() && d.more() {
                d.entry(it.key(), it.value())?;
                it.next();
            }
            it.status()
        }
        FileKind::HashIndex(_) => {
            let data = fs.read_all(path, IoClass::UserRead)?;
            let all = crate::index::unified::checkpoint::decode(&data, path)?;
            for (partition, gens) in &all {
                for (i, g) in gens.iter().enumerate() {
                    let tables: Vec<String> = g.tables().iter().map(|t| format!("#{t}")).collect();
                    d.line(&format!(
                        "partition from {:?} generation {i}: {} buckets, {} functions, {} key entries ({} overflow), load {:.2}, tables {}",
                        escape(partition, d.opts.hex),
                        g.buckets(),
                        g.functions(),
                        g.entries(),
                        g.overflow_entries(),
                        g.load_factor(),
                        tables.join(" ")
                    ))?;
                }
            }
            Ok(())
        }
        FileKind::Journal(_) => {
            let data = fs.read_all(path, IoClass::UserRead)?;
            let log = read_log(&data);
            for (offset, rec) in log.records {
                if !d.more() {
                    break;
                }
                if let Some(c) = Control::decode(&rec) {
                    let c = c.map_err(|why| Error::corruption(path, offset, why))?;
                    d.line(&match c {
                        Control::Link { journal, len } => {
                            format!("link at {offset}: follows journal {journal} of {len} bytes")
                        }
                        Control::Seal => format!("seal at {offset}: older journals synced"),
                    })?;
                    continue;
                }
                let b = WriteBatch::from_record(rec)
                    .map_err(|why| Error::corruption(path, offset, why))?;
                d.line(&format!(
                    "batch at {offset}: seq {} ops {}",
                    b.sequence(),
                    b.len()
                ))?;
                for (i, op) in b.iter().enumerate() {
                    // The limit counts lines, a batch's entries too.
                    if !d.more() {
                        break;
                    }
                    let op = op.map_err(|why| Error::corruption(path, offset, why))?;
                    let ik = key::encode(op.key, b.sequence() + i as u64, op.kind as u8);
                    d.entry(&ik, op.value)?;
                }
            }
            d.log_damage(path, log.damage, log.torn_tail_at)
        }
        FileKind::Manifest(_) => {
            let data = fs.read_all(path, IoClass::UserRead)?;
            let log = read_log(&data);
            for (offset, rec) in log.records {
                if !d.more() {
                    break;
                }
                let e = VersionEdit::decode(&rec)
                    .map_err(|why| Error::corruption(path, offset, why))?;
                d.line(&format!(
                    "edit at {offset}: {}",
                    describe_edit(&e, d.opts.hex)
                ))?;
            }
            d.log_damage(path, log.damage, log.torn_tail_at)
        }
        FileKind::ValueLog(_) | FileKind::ValueSegment(_) => {
            let data = fs.read_all(path, IoClass::UserRead)?;
            let scan = scan_file(&data, path)?;
            for (offset, len, rec) in scan.records {
                if !d.more() {
                    break;
                }
                let value = match kind_of(rec.flags) {
                    crate::record::KIND_RELOCATE => ValuePointer::decode(&rec.value).map_or_else(
                        || "malformed pointer".into(),
                        |p| format!("-> {}", show_pointer(&p)),
                    ),
                    crate::record::KIND_RELOCATE_RUN => {
                        match crate::record::run_pointers(&rec.value) {
                            Some(run) => format!("relocation run of {} pointers", run.len()),
                            None => "malformed relocation run".into(),
                        }
                    }
                    _ => d.value(&rec.value),
                };
                d.line(&format!(
                    "record at {offset} ({len} B): seq {} flags {:#04x} key {} value {value}",
                    rec.seq,
                    rec.flags,
                    escape(&rec.key, opts.hex),
                ))?;
            }
            if let Some(at) = scan.torn_tail_at {
                d.line(&format!("torn tail at {at}"))?;
            }
            match scan.damage {
                Some((off, why)) => Err(Error::corruption(path, off, why)),
                None => Ok(()),
            }
        }
        FileKind::ValueTable(n) => {
            let size = std::fs::metadata(path).map_err(io)?.len();
            let cache = Arc::new(BlockCache::new(0));
            let t = ValueTable::open(&fs, path.to_path_buf(), n, size, cache)?;
            let p = t.properties();
            d.line(&format!(
                "value table: {} records, {} hot, records end at {}, {} index partitions",
                p.records,
                if t.is_hot() { "hot" } else { "cold" },
                p.records_end,
                p.index_partitions
            ))?;
            let (entries, _) = t.index_entries(IoClass::UserRead)?;
            let mut lines = Vec::new();
            let shown: Vec<_> = entries.into_iter().take(d.left()).collect();
            t.read_coalesced(&shown, 0, IoClass::UserRead, |e, _, r| {
                lines.push(format!(
                    "record at {} ({} B): seq {} key {} value {}",
                    e.handle.offset,
                    e.handle.len,
                    r.seq,
                    escape(r.key, opts.hex),
                    d.value(r.value)
                ));
                Ok(())
            })?;
            for l in lines {
                d.line(&l)?;
            }
            Ok(())
        }
        FileKind::Current | FileKind::Lock | FileKind::Temp => {
            let data = std::fs::read(path).map_err(io)?;
            d.line(&escape(&data, opts.hex))
        }
    }
}

/// A value pointer as `#file@offset+length (store s, crc c)`.
fn show_pointer(p: &ValuePointer) -> String {
    format!(
        "#{}@{}+{} (store {}, crc {:08x})",
        p.file, p.offset, p.record_len, p.store, p.record_crc
    )
}

/// An internal key as `user-key @ sequence`, as table entries print.
fn show_ikey(ikey: &[u8], hex: bool) -> String {
    if key::is_valid(ikey) {
        format!(
            "{} @ {}",
            escape(key::user_key(ikey), hex),
            key::sequence(ikey)
        )
    } else {
        format!("malformed:{}", escape(ikey, true))
    }
}

/// A manifest edit, only the fields it sets, comma-separated.
fn describe_edit(e: &VersionEdit, hex: bool) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(v) = e.format_version {
        parts.push(format!("format {v}"));
    }
    if let Some(s) = &e.index_shape {
        parts.push(format!("index {s}"));
    }
    if let Some(s) = &e.preset {
        parts.push(format!("preset {s}"));
    }
    for (name, v) in [
        ("journal", e.log_number),
        ("next file", e.next_file_number),
        ("last sequence", e.last_sequence),
    ] {
        if let Some(v) = v {
            parts.push(format!("{name} {v}"));
        }
    }
    if let Some(t) = e.totals {
        parts.push(format!(
            "totals since sequence {}: user {} bytes, written {} bytes",
            t.since_sequence, t.user_bytes_written, t.bytes_written
        ));
    }
    for (level, k) in &e.compact_pointers {
        parts.push(format!("L{level} compact pointer {}", show_ikey(k, hex)));
    }
    for (level, n) in &e.deleted {
        parts.push(format!("-L{level} #{n}"));
    }
    for (level, f) in &e.added {
        let mut values = if f.value_bytes > 0 {
            format!(", {} value bytes", f.value_bytes)
        } else {
            String::new()
        };
        if let Some(p) = f.payload {
            values += &format!(", {} pointers, {} inline bytes", p.pointers, p.inline_bytes);
        }
        parts.push(format!(
            "+L{level} #{} ({} bytes, {} entries, {} deletions{values}, {} .. {})",
            f.number,
            f.file_size,
            f.entries,
            f.deletions,
            show_ikey(&f.smallest, hex),
            show_ikey(&f.largest, hex)
        ));
    }
    for b in &e.boundaries {
        parts.push(format!("partition boundary {}", escape(b, hex)));
    }
    if let Some((file, offset)) = e.values.log.tail {
        parts.push(format!("value log tail #{file}@{offset}"));
    }
    for (file, bytes) in &e.values.garbage {
        parts.push(format!("garbage #{file} +{bytes}"));
    }
    for (file, len) in &e.values.log.sealed {
        parts.push(format!("sealed #{file} {len} bytes"));
    }
    match e.values.log.journal {
        Some((0, 0)) => parts.push("value log is not the journal".into()),
        Some((file, offset)) => parts.push(format!("journal replay from #{file}@{offset}")),
        None => {}
    }
    if let Some(g) = e.values.hash.groups {
        parts.push(format!("{g} hash groups"));
    }
    for (what, list) in [
        ("+", &e.values.hash.added),
        ("-", &e.values.hash.dropped),
        ("to cold ", &e.values.hash.to_cold),
    ] {
        if !list.is_empty() {
            let files: Vec<String> = list.iter().map(|(g, f)| format!("g{g}:#{f}")).collect();
            parts.push(format!("{what}segments {}", files.join(" ")));
        }
    }
    let t = &e.values.table;
    if t.create {
        parts.push("table layout".into());
    }
    for (file, f) in &t.added {
        let temp = if f.hot { "hot" } else { "cold" };
        parts.push(format!("+vtable #{file} ({} bytes, {temp})", f.size));
    }
    for (file, k) in &t.keys {
        parts.push(format!(
            "#{file} keys {}..{}",
            escape(&k.smallest, false),
            escape(&k.largest, false)
        ));
    }
    for file in &t.removed {
        parts.push(format!("-vtable #{file}"));
    }
    for (file, heirs) in &t.inherited {
        let heirs: Vec<String> = heirs.iter().map(|h| format!("#{h}")).collect();
        parts.push(format!("#{file} inherited by {}", heirs.join(" ")));
    }
    for (file, delta) in &t.refs {
        parts.push(format!("refs #{file} {delta:+}"));
    }
    if parts.is_empty() {
        "empty".into()
    } else {
        parts.join(", ")
    }
}

struct Dumper<'a> {
    out: &'a mut dyn Write,
    opts: DumpOptions,
    printed: u64,
}

impl Dumper<'_> {
    fn more(&self) -> bool {
        self.opts.limit.is_none_or(|l| self.printed < l)
    }

    /// Lines left under the limit.
    fn left(&self) -> usize {
        self.opts
            .limit
            .map_or(usize::MAX, |l| l.saturating_sub(self.printed) as usize)
    }

    fn line(&mut self, s: &str) -> Result<()> {
        self.printed += 1;
        writeln!(self.out, "{s}").map_err(|e| Error::io("write", "dump output", e))
    }

    fn value(&self, v: &[u8]) -> String {
        let max = if self.opts.max_value_bytes == 0 {
            v.len()
        } else {
            self.opts.max_value_bytes
        };
        let shown = escape(&v[..v.len().min(max)], self.opts.hex);
        if v.len() > max {
            format!("({} B) {shown}...", v.len())
        } else {
            format!("({} B) {shown}", v.len())
        }
    }

    /// One index entry: `key @ seq kind => value`.
    fn entry(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        if !key::is_valid(ikey) {
            return self.line(&format!("malformed key {}", escape(ikey, true)));
        }
        let what = match Kind::from_u8(key::kind_byte(ikey)) {
            Some(Kind::Delete) => "delete".to_string(),
            Some(Kind::Value) => format!("value {}", self.value(value)),
            Some(Kind::ValuePointer) => match ValuePointer::decode(value) {
                Some(p) => format!("pointer {}", show_pointer(&p)),
                None => "malformed pointer".to_string(),
            },
            None => "unknown kind".to_string(),
        };
        // The version below this one was counted as garbage already.
        let counted = if key::shadow_counted(ikey) {
            " (shadows counted)"
        } else {
            ""
        };
        self.line(&format!(
            "{} @ {} {what}{counted}",
            escape(key::user_key(ikey), self.opts.hex),
            key::sequence(ikey)
        ))
    }

    fn log_damage(
        &mut self,
        path: &Path,
        damage: Vec<(u64, String)>,
        torn_tail_at: Option<u64>,
    ) -> Result<()> {
        if let Some(at) = torn_tail_at {
            self.line(&format!("torn tail at {at}"))?;
        }
        match damage.into_iter().next() {
            Some((off, why)) => Err(Error::corruption(path, off, why)),
            None => Ok(()),
        }
    }
}

/// Dumps LightKV's write buffer (`docs/format/pwb.md`): its geometry, then
/// the records recovery would keep, in sequence order. Recovery runs on an
/// in-memory copy of the region, so the file is left as it is.
/// The lightkv clean shutdown image (`docs/format/lightkv-image.md`): its
/// size and hash, and whether the write buffer beside it names it (then
/// the next open loads it instead of scanning the buffer).
fn dump_clean_image(path: &Path, out: &mut dyn Write) -> Result<()> {
    let data = std::fs::read(path).map_err(|e| Error::io("read", path, e))?;
    let hash = crate::lightkv::buffer::image_mark(&data);
    let region = path.with_file_name(crate::db::light::BUFFER_FILE);
    let at = crate::pwb::format::CLEAN_AT as usize;
    let mark = std::fs::read(&region)
        .ok()
        .and_then(|d| {
            d.get(at..at + 8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8")))
        })
        .unwrap_or(0);
    writeln!(
        out,
        "clean shutdown image: {} bytes, hash {hash:016x}; the write buffer's clean mark \
         {mark:016x} ({})",
        data.len(),
        if mark == hash {
            "the next open loads the image"
        } else {
            "not this image: the next open scans the buffer"
        }
    )
    .map_err(|e| Error::io("write", "dump output", e))
}

fn dump_write_buffer(path: &Path, opts: DumpOptions, out: &mut dyn Write) -> Result<()> {
    let data = std::fs::read(path).map_err(|e| Error::io("read", path, e))?;
    let copy = crate::pm::SimPm::new_eadr(path, data.len() as u64)?;
    crate::pm::Pm::write(&copy, 0, &data)?;
    let (pwb, rec) = crate::pwb::Pwb::open(Arc::new(copy), 0)?;
    let (segments, segment_bytes) = pwb.geometry();
    let (_, free) = pwb.segments();
    let mut d = Dumper {
        out,
        opts,
        printed: 0,
    };
    writeln!(
        d.out,
        "write buffer: {} bytes, {segments} segments of {segment_bytes} bytes ({free} free), \
         watermark {}, {} records kept above it (operations {}..={})",
        data.len(),
        rec.watermark,
        rec.records.len(),
        rec.watermark + 1,
        rec.last_seq
    )
    .map_err(|e| Error::io("write", "dump output", e))?;
    for r in &rec.records {
        if !d.more() {
            break;
        }
        let at = format!(
            "#{} [{}/{}] segment {} offset {}",
            r.seq,
            r.place + 1,
            r.count,
            r.loc.segment,
            r.loc.offset
        );
        let line = match crate::lightkv::buffer::describe_payload(&r.payload) {
            Some((true, key, _, prev)) => {
                format!(
                    "{at}: {} delete (previous #{prev})",
                    escape(key, d.opts.hex)
                )
            }
            Some((false, key, value, prev)) => format!(
                "{at}: {} value {} (previous #{prev})",
                escape(key, d.opts.hex),
                d.value(value)
            ),
            None => format!(
                "{at}: payload that does not decode ({} bytes)",
                r.payload.len()
            ),
        };
        d.line(&line)?;
    }
    Ok(())
}
