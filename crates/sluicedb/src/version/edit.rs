//! A version edit: the delta between two versions, one manifest record.
//!
//! Encoding: a sequence of fields `tag: u32 | len: u32 | payload`; the
//! payloads are fixed-width little-endian (`docs/format/manifest.md`). An
//! unknown tag is an error: a manifest from a newer format is refused rather
//! than half-understood. Every new tag bumps [`MANIFEST_FORMAT_VERSION`], and
//! readers check a manifest's version ([`format_version_of`]) before they
//! decode its fields, so that an older build reports a newer manifest as an
//! unsupported version, not as damage.

use std::sync::Arc;

use super::tag;
use crate::coding::{put_bytes, put_u32, put_u64, Reader};
use crate::key;
use crate::stats::Totals;
use crate::table::cache::TableSlot;
use crate::value::meta::ValueEdit;

/// The manifest format this build writes, and the newest it reads.
///
/// - 1: tags 1 to 31. (Tags 16 to 31 were added under version 1, so a
///   build from before one of them reports such a manifest as corrupt.)
/// - 2: the same fields; a build reading 2 checks the version before any
///   field, so versions past it are reported as unsupported.
/// - 3: tag 32, the totals since creation ([`crate::Totals`]). A writable
///   open starts a new manifest, so a manifest of version 2 never gets one.
pub(crate) const MANIFEST_FORMAT_VERSION: u32 = 3;

/// A table in a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileMeta {
    pub(crate) number: u64,
    pub(crate) file_size: u64,
    /// Smallest and largest internal keys.
    pub(crate) smallest: Vec<u8>,
    pub(crate) largest: Vec<u8>,
    pub(crate) entries: u64,
    pub(crate) deletions: u64,
    /// Bytes of the value store's records its pointer entries name (the
    /// separated values the table keeps alive); 0 without pointers.
    pub(crate) value_bytes: u64,
    /// How much of it is the user's data; `None` for tables written before
    /// the manifest recorded it.
    pub(crate) payload: Option<TablePayload>,
    /// The open table, once a point lookup pinned it (not part of the
    /// manifest record: `TableCache::table_of`).
    pub(crate) table: TableSlot,
}

/// What of a table is the user's data, for the space limit's denominator
/// (`docs/design.md`, "Space-aware throttling"): the keys and values of its
/// inline puts, and how many pointer entries it holds (their records hold
/// the key and value, behind a header each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TablePayload {
    pub(crate) pointers: u64,
    /// User key and value bytes of the entries that hold their value.
    pub(crate) inline_bytes: u64,
}

impl FileMeta {
    /// The user key and value bytes of the table's inline puts (the
    /// manifest's payload counts, tag 27); a table written before them
    /// counts whole.
    pub(crate) fn inline_bytes(&self) -> u64 {
        self.payload.map_or(self.file_size, |p| p.inline_bytes)
    }

    pub(crate) fn smallest_user_key(&self) -> &[u8] {
        key::user_key(&self.smallest)
    }
    pub(crate) fn largest_user_key(&self) -> &[u8] {
        key::user_key(&self.largest)
    }

    /// Whether `user_key` lies within the table's key range.
    pub(crate) fn holds_user_key(&self, user_key: &[u8]) -> bool {
        self.smallest_user_key() <= user_key && user_key <= self.largest_user_key()
    }

    /// Whether the table's key range meets the user keys from `lower`
    /// through `upper` (either end open when `None`).
    pub(crate) fn meets_range(&self, lower: Option<&[u8]>, upper: Option<&[u8]>) -> bool {
        lower.is_none_or(|l| self.largest_user_key() >= l)
            && upper.is_none_or(|u| self.smallest_user_key() <= u)
    }
}

/// A change to the set of tables and counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VersionEdit {
    pub(crate) format_version: Option<u32>,
    pub(crate) index_shape: Option<String>,
    /// Journals numbered below this are fully reflected in tables.
    pub(crate) log_number: Option<u64>,
    pub(crate) next_file_number: Option<u64>,
    pub(crate) last_sequence: Option<u64>,
    pub(crate) compact_pointers: Vec<(u32, Vec<u8>)>,
    pub(crate) deleted: Vec<(u32, u64)>,
    pub(crate) added: Vec<(u32, Arc<FileMeta>)>,
    /// The value store's layouts' records.
    pub(crate) values: ValueEdit,
    /// The preset the database was created with (its CLI name).
    pub(crate) preset: Option<String>,
    /// Range partition boundaries added (the unified shape's splits,
    /// UniKV, ICDE '20, §III-D): each user key starts a new partition.
    pub(crate) boundaries: Vec<Vec<u8>>,
    /// The unified shape's newest hash index checkpoint file (UniKV, ICDE '20,
    /// §III-G).
    pub(crate) hash_index_checkpoint: Option<u64>,
    /// The totals as of this record (every installed edit carries them).
    pub(crate) totals: Option<Totals>,
}

impl VersionEdit {
    pub(crate) fn add_file(&mut self, level: usize, f: FileMeta) {
        self.added.push((level as u32, Arc::new(f)));
    }
    pub(crate) fn delete_file(&mut self, level: usize, number: u64) {
        self.deleted.push((level as u32, number));
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut field = |t: u32, payload: &[u8]| {
            put_u32(&mut out, t);
            put_bytes(&mut out, payload);
        };
        if let Some(v) = self.format_version {
            field(tag::FORMAT_VERSION, &v.to_le_bytes());
        }
        if let Some(s) = &self.index_shape {
            field(tag::INDEX_SHAPE, s.as_bytes());
        }
        if let Some(s) = &self.preset {
            field(tag::PRESET, s.as_bytes());
        }
        for (t, v) in [
            (tag::LOG_NUMBER, self.log_number),
            (tag::NEXT_FILE_NUMBER, self.next_file_number),
            (tag::LAST_SEQUENCE, self.last_sequence),
            (tag::HASH_INDEX_CHECKPOINT, self.hash_index_checkpoint),
        ] {
            if let Some(v) = v {
                field(t, &v.to_le_bytes());
            }
        }
        for (level, k) in &self.compact_pointers {
            let mut p = Vec::new();
            put_u32(&mut p, *level);
            p.extend_from_slice(k);
            field(tag::COMPACT_POINTER, &p);
        }
        for (level, n) in &self.deleted {
            let mut p = Vec::new();
            put_u32(&mut p, *level);
            put_u64(&mut p, *n);
            field(tag::DELETED_FILE, &p);
        }
        self.values.encode(&mut field);
        for (level, f) in &self.added {
            let mut p = Vec::new();
            put_u32(&mut p, *level);
            put_u64(&mut p, f.number);
            put_u64(&mut p, f.file_size);
            put_u64(&mut p, f.entries);
            put_u64(&mut p, f.deletions);
            put_bytes(&mut p, &f.smallest);
            put_bytes(&mut p, &f.largest);
            field(tag::NEW_FILE, &p);
            if f.value_bytes > 0 {
                let mut p = Vec::new();
                put_u64(&mut p, f.number);
                put_u64(&mut p, f.value_bytes);
                field(tag::FILE_VALUE_BYTES, &p);
            }
            if let Some(payload) = f.payload {
                let mut p = Vec::new();
                put_u64(&mut p, f.number);
                put_u64(&mut p, payload.pointers);
                put_u64(&mut p, payload.inline_bytes);
                field(tag::FILE_PAYLOAD, &p);
            }
        }
        for b in &self.boundaries {
            field(tag::PARTITION_BOUNDARY, b);
        }
        if let Some(t) = self.totals {
            let mut p = Vec::new();
            put_u64(&mut p, t.user_bytes_written);
            put_u64(&mut p, t.bytes_written);
            put_u64(&mut p, t.since_sequence);
            field(tag::TOTALS, &p);
        }
        out
    }

    /// Decodes a record; the error says what is wrong (callers add the file
    /// and offset).
    pub(crate) fn decode(data: &[u8]) -> Result<Self, String> {
        let mut e = VersionEdit::default();
        let mut r = Reader::new(data);
        while !r.is_empty() {
            let at = r.pos();
            let (t, payload) = r
                .u32()
                .zip(r.len_prefixed())
                .ok_or_else(|| format!("truncated field at byte {at}"))?;
            let mut p = Reader::new(payload);
            let bad = || format!("malformed field with tag {t} at byte {at}");
            let u64_only = |p: &mut Reader<'_>| p.u64().filter(|_| p.is_empty());
            match t {
                tag::FORMAT_VERSION => {
                    e.format_version = Some(p.u32().filter(|_| p.is_empty()).ok_or_else(bad)?)
                }
                tag::INDEX_SHAPE => {
                    e.index_shape = Some(String::from_utf8(payload.to_vec()).map_err(|_| bad())?)
                }
                tag::PRESET => {
                    e.preset = Some(String::from_utf8(payload.to_vec()).map_err(|_| bad())?)
                }
                tag::LOG_NUMBER => e.log_number = Some(u64_only(&mut p).ok_or_else(bad)?),
                tag::NEXT_FILE_NUMBER => {
                    e.next_file_number = Some(u64_only(&mut p).ok_or_else(bad)?)
                }
                tag::LAST_SEQUENCE => e.last_sequence = Some(u64_only(&mut p).ok_or_else(bad)?),
                tag::HASH_INDEX_CHECKPOINT => {
                    e.hash_index_checkpoint = Some(u64_only(&mut p).ok_or_else(bad)?)
                }
                tag::TOTALS => {
                    let user_bytes_written = p.u64().ok_or_else(bad)?;
                    let bytes_written = p.u64().ok_or_else(bad)?;
                    let since_sequence = u64_only(&mut p).ok_or_else(bad)?;
                    e.totals = Some(Totals {
                        user_bytes_written,
                        bytes_written,
                        since_sequence,
                    });
                }
                tag::COMPACT_POINTER => {
                    let level = p.u32().ok_or_else(bad)?;
                    let k = payload[4..].to_vec();
                    if !key::is_valid(&k) {
                        return Err(bad());
                    }
                    e.compact_pointers.push((level, k));
                }
                tag::DELETED_FILE => {
                    let level = p.u32().ok_or_else(bad)?;
                    let n = u64_only(&mut p).ok_or_else(bad)?;
                    e.deleted.push((level, n));
                }
                tag::NEW_FILE => {
                    let f = (|| {
                        let level = p.u32()?;
                        let number = p.u64()?;
                        let file_size = p.u64()?;
                        let entries = p.u64()?;
                        let deletions = p.u64()?;
                        let smallest = p.len_prefixed()?.to_vec();
                        let largest = p.len_prefixed()?.to_vec();
                        let ok = p.is_empty()
                            && file_size <= MAX_RECORDED_BYTES
                            && key::is_valid(&smallest)
                            && key::is_valid(&largest)
                            && key::compare(&smallest, &largest).is_le();
                        ok.then_some((
                            level,
                            FileMeta {
                                number,
                                file_size,
                                smallest,
                                largest,
                                entries,
                                deletions,
                                value_bytes: 0,
                                payload: None,
                                table: TableSlot::default(),
                            },
                        ))
                    })()
                    .ok_or_else(bad)?;
                    e.added.push((f.0, Arc::new(f.1)));
                }
                tag::FILE_VALUE_BYTES => {
                    let number = p.u64().ok_or_else(bad)?;
                    let bytes = u64_only(&mut p)
                        .filter(|&b| b <= MAX_RECORDED_BYTES)
                        .ok_or_else(bad)?;
                    added_file(&mut e.added, number)
                        .ok_or_else(bad)?
                        .value_bytes = bytes;
                }
                tag::FILE_PAYLOAD => {
                    let number = p.u64().ok_or_else(bad)?;
                    let pointers = p.u64().ok_or_else(bad)?;
                    let inline_bytes = u64_only(&mut p)
                        .filter(|&b| b <= MAX_RECORDED_BYTES)
                        .ok_or_else(bad)?;
                    added_file(&mut e.added, number).ok_or_else(bad)?.payload =
                        Some(TablePayload {
                            pointers,
                            inline_bytes,
                        });
                }
                tag::PARTITION_BOUNDARY => e.boundaries.push(payload.to_vec()),
                _ => match e.values.decode(t, payload) {
                    Some(r) => r.map_err(|()| bad())?,
                    None => return Err(format!("unknown field tag {t} at byte {at}")),
                },
            }
        }
        Ok(e)
    }
}

/// The format version a manifest record declares (the `FORMAT_VERSION`
/// field of a manifest's first record), read before anything else in it,
/// so that fields a newer version added are never mistaken for damage.
/// `None` when the record has no such field or is malformed before it.
pub(crate) fn format_version_of(data: &[u8]) -> Option<u32> {
    let mut r = Reader::new(data);
    while !r.is_empty() {
        let (t, payload) = r.u32().zip(r.len_prefixed())?;
        if t == tag::FORMAT_VERSION {
            let mut p = Reader::new(payload);
            return p.u32().filter(|_| p.is_empty());
        }
    }
    None
}

/// The most bytes a manifest may record for one table's size, or the value
/// bytes or inline bytes it stands for: 2^48 (256 TiB), far past any
/// table, so that the sums shapes and space accounting take over a
/// version's tables cannot overflow for any number of tables a manifest
/// can hold (fuzzing found a damaged record's sizes overflowing them).
pub(crate) const MAX_RECORDED_BYTES: u64 = 1 << 48;

/// The table numbered `number` among `added`: a field about a table
/// follows the NEW_FILE field of its table in the same record.
fn added_file(added: &mut [(u32, Arc<FileMeta>)], number: u64) -> Option<&mut FileMeta> {
    added
        .iter_mut()
        .rev()
        .find(|(_, f)| f.number == number)
        .map(|(_, f)| Arc::make_mut(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut e = VersionEdit {
            format_version: Some(1),
            index_shape: Some("leveled".into()),
            preset: Some("hashkv".into()),
            log_number: Some(7),
            next_file_number: Some(20),
            last_sequence: Some(1234),
            ..Default::default()
        };
        e.compact_pointers.push((2, key::encode(b"m", 5, 1)));
        e.delete_file(1, 9);
        e.values.log.tail = Some((12, 4096));
        e.values.garbage.push((12, 777));
        e.values.log.sealed.push((13, 4 << 20));
        e.values.log.journal = Some((14, 16));
        e.values.log.durable = Some((14, 900));
        e.values.hash.groups = Some(4);
        e.values.hash.added.push((3, 21));
        e.values.hash.dropped.push((3, 17));
        e.values.hash.to_cold.push((3, 15));
        e.values.hash.splits.push((2, 4));
        e.add_file(
            2,
            FileMeta {
                number: 11,
                file_size: 4096,
                smallest: key::encode(b"a", 3, 1),
                largest: key::encode(b"z", 8, 0),
                entries: 10,
                deletions: 1,
                value_bytes: 5000,
                payload: Some(TablePayload {
                    pointers: 4,
                    inline_bytes: 60,
                }),
                table: TableSlot::default(),
            },
        );
        e.boundaries.push(b"k".to_vec());
        e.hash_index_checkpoint = Some(31);
        e.totals = Some(Totals {
            user_bytes_written: 1 << 40,
            bytes_written: 3 << 40,
            since_sequence: 77,
        });
        let b = e.encode();
        assert_eq!(VersionEdit::decode(&b).unwrap(), e);
        for cut in 0..b.len() {
            // Every truncation inside a field is rejected or decodes a prefix
            // of the fields; it never panics.
            let _ = VersionEdit::decode(&b[..cut]);
        }
        let mut unknown = b.clone();
        unknown[0] = 99;
        assert!(VersionEdit::decode(&unknown).is_err());
    }
}

/// The worked example of `docs/format/manifest.md`, byte for byte.
#[cfg(test)]
mod doc_example {
    use super::*;

    #[test]
    fn manifest_md_worked_example() {
        let mut e = VersionEdit::default();
        e.add_file(
            0,
            FileMeta {
                number: 12,
                file_size: 4096,
                smallest: key::encode(b"a", 3, 1),
                largest: key::encode(b"z", 8, 1),
                entries: 10,
                deletions: 0,
                value_bytes: 0,
                payload: None,
                table: TableSlot::default(),
            },
        );
        e.log_number = Some(11);
        let b = e.encode();
        // Field order: log number first, then new files.
        let log: Vec<u8> = [&[3, 0, 0, 0, 8, 0, 0, 0][..], &11u64.to_le_bytes()].concat();
        assert_eq!(&b[..16], log.as_slice());
        let mut file = vec![8, 0, 0, 0, 62, 0, 0, 0];
        file.extend_from_slice(&0u32.to_le_bytes());
        file.extend_from_slice(&12u64.to_le_bytes());
        file.extend_from_slice(&4096u64.to_le_bytes());
        file.extend_from_slice(&10u64.to_le_bytes());
        file.extend_from_slice(&0u64.to_le_bytes());
        file.extend_from_slice(&[9, 0, 0, 0, 0x61, 0x01, 0x03, 0, 0, 0, 0, 0, 0]);
        file.extend_from_slice(&[9, 0, 0, 0, 0x7a, 0x01, 0x08, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[16..], file.as_slice());
    }
}
