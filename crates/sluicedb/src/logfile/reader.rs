//! Reads the records of a log file and classifies damage.
//!
//! A crash can leave the last record of a file incomplete (a *torn tail*):
//! a short header, a short payload, or a fragment whose checksum fails with
//! nothing valid after it. That is the end of history, not corruption.
//! Damage followed by a valid fragment is corruption in the middle of the
//! file: synced history was lost, which callers report (or skip, in salvage
//! mode).

use super::format::{fragment_crc, FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::coding::{u16_at, u32_at};

/// What the reader found in one file.
#[derive(Debug, Default)]
pub(crate) struct LogRecords {
    /// Complete records with the file offset where each starts.
    pub(crate) records: Vec<(u64, Vec<u8>)>,
    /// The file ends in an incomplete or damaged record at this offset that
    /// nothing valid follows.
    pub(crate) torn_tail_at: Option<u64>,
    /// Why the tail is torn when a complete fragment failed its checks
    /// (rather than the file simply ending early, or zeros). Logs whose
    /// records are each synced before anything relies on them (the
    /// manifest) treat this as corruption: a crash tears by truncation.
    pub(crate) torn_tail_damage: Option<String>,
    /// Damage in the middle of the file: the offset and why. Records after it
    /// are still returned (callers decide whether to use them).
    pub(crate) damage: Vec<(u64, String)>,
}

enum Fragment<'a> {
    Ok(FragmentType, &'a [u8]),
    /// Damaged fragment; the reader resumes at the next block.
    Bad(String),
    /// Nothing more (end of data, or a short header at the end).
    Eof,
    /// A header whose length runs past the end of the file.
    Truncated,
}

/// True if a complete fragment that passes every check starts at `q`.
fn valid_fragment_at(data: &[u8], q: usize) -> bool {
    let block_left = BLOCK_SIZE - (q % BLOCK_SIZE);
    if block_left < HEADER_SIZE || q + HEADER_SIZE > data.len() {
        return false;
    }
    let h = &data[q..q + HEADER_SIZE];
    let len = u16_at(h, 4) as usize;
    let ty = h[6];
    FragmentType::from_u8(ty).is_some()
        && HEADER_SIZE + len <= block_left
        && q + HEADER_SIZE + len <= data.len()
        && fragment_crc(ty, &data[q + HEADER_SIZE..q + HEADER_SIZE + len]) == u32_at(h, 0)
}

/// After damage at `at`, the next position where a valid fragment starts,
/// or the end of the data. Scanning byte by byte (instead of skipping to the
/// next block) tells damage followed by valid data, which is corruption,
/// from a torn tail, which is not; a false match needs a CRC collision.
fn resync(data: &[u8], at: usize) -> usize {
    (at + 1..data.len())
        .find(|&q| valid_fragment_at(data, q))
        .unwrap_or(data.len())
}

fn next_fragment<'a>(data: &'a [u8], pos: &mut usize) -> Fragment<'a> {
    loop {
        let block_left = BLOCK_SIZE - (*pos % BLOCK_SIZE);
        if block_left < HEADER_SIZE {
            *pos += block_left; // zero-filled block trailer
            continue;
        }
        if *pos >= data.len() {
            return Fragment::Eof;
        }
        if data.len() - *pos < HEADER_SIZE {
            return Fragment::Truncated;
        }
        let at = *pos;
        let h = &data[at..at + HEADER_SIZE];
        let crc = u32_at(h, 0);
        let len = u16_at(h, 4) as usize;
        let ty = h[6];
        let why = if ty == 0 && len == 0 && crc == 0 {
            "zeroed fragment header".to_string()
        } else if HEADER_SIZE + len > block_left {
            format!("fragment length {len} crosses the block end")
        } else if at + HEADER_SIZE + len > data.len() {
            // A record cut short by the end of the file is a torn write,
            // unless valid data follows: then its length field is damaged.
            let next = resync(data, at);
            if next >= data.len() {
                return Fragment::Truncated;
            }
            *pos = next;
            return Fragment::Bad(format!("fragment length {len} runs past valid data"));
        } else if fragment_crc(ty, &data[at + HEADER_SIZE..at + HEADER_SIZE + len]) != crc {
            "fragment checksum mismatch".to_string()
        } else if let Some(t) = FragmentType::from_u8(ty) {
            *pos += HEADER_SIZE + len;
            return Fragment::Ok(t, &data[at + HEADER_SIZE..at + HEADER_SIZE + len]);
        } else {
            format!("unknown fragment type {ty}")
        };
        *pos = resync(data, at);
        return Fragment::Bad(why);
    }
}

/// Parses every record of a log file held in memory.
pub(crate) fn read_log(data: &[u8]) -> LogRecords {
    let mut out = LogRecords::default();
    let mut pos = 0usize;
    let mut partial: Option<(u64, Vec<u8>)> = None;
    // Damage seen since the last good record; it becomes mid-file damage if a
    // valid fragment follows, or the torn tail if nothing does.
    let mut pending: Option<(u64, String, bool)> = None;
    loop {
        let at = pos as u64;
        let frag = next_fragment(data, &mut pos);
        match frag {
            Fragment::Ok(ty, payload) => {
                if let Some((o, why, _)) = pending.take() {
                    out.damage.push((o, why));
                }
                match ty {
                    FragmentType::Full => {
                        if let Some((start, _)) = partial.take() {
                            out.damage.push((start, "record missing its end".into()));
                        }
                        out.records.push((at, payload.to_vec()));
                    }
                    FragmentType::First => {
                        if let Some((start, _)) = partial.take() {
                            out.damage.push((start, "record missing its end".into()));
                        }
                        partial = Some((at, payload.to_vec()));
                    }
                    FragmentType::Middle | FragmentType::Last => match partial.as_mut() {
                        Some((_, buf)) => {
                            buf.extend_from_slice(payload);
                            if ty == FragmentType::Last {
                                let rec = partial.take().expect("partial present");
                                out.records.push(rec);
                            }
                        }
                        None => out
                            .damage
                            .push((at, "record continuation without a start".into())),
                    },
                }
            }
            Fragment::Bad(reason) => {
                if pending.is_none() {
                    let zeros = data
                        .get(at as usize..(at as usize + HEADER_SIZE).min(data.len()))
                        .is_some_and(|h| h.iter().all(|&b| b == 0));
                    let start = partial.take().map_or(at, |(s, _)| s);
                    pending = Some((start, reason, zeros));
                }
            }
            Fragment::Eof | Fragment::Truncated => {
                if let Some((_, why, false)) = &pending {
                    out.torn_tail_damage = Some(why.clone());
                }
                let torn = pending
                    .take()
                    .map(|(o, _, _)| o)
                    .or_else(|| partial.take().map(|(s, _)| s))
                    .or_else(|| matches!(frag, Fragment::Truncated).then_some(at));
                out.torn_tail_at = torn;
                return out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{CountingFs, Fs, IoClass, MemFs};
    use crate::logfile::LogWriter;
    use std::path::Path;
    use std::sync::Arc;

    fn write(records: &[Vec<u8>]) -> Vec<u8> {
        let mem = MemFs::new();
        let fs = CountingFs::new(Arc::new(mem.clone()));
        let p = Path::new("/l");
        let mut w = LogWriter::new(fs.create(p, IoClass::Journal).unwrap());
        for r in records {
            w.add_record(r).unwrap();
        }
        mem.read_all(p).unwrap()
    }

    fn sample() -> Vec<Vec<u8>> {
        // Small, empty, block-spanning and multi-block records.
        vec![
            b"a".to_vec(),
            vec![],
            vec![7u8; BLOCK_SIZE - 20],
            vec![9u8; 3 * BLOCK_SIZE + 100],
            b"tail".to_vec(),
        ]
    }

    #[test]
    fn round_trip_fragments() {
        let recs = sample();
        let got = read_log(&write(&recs));
        assert_eq!(got.torn_tail_at, None);
        assert!(got.damage.is_empty());
        let bodies: Vec<_> = got.records.into_iter().map(|(_, r)| r).collect();
        assert_eq!(bodies, recs);
    }

    /// The real file system takes a record's parts in its buffer, or by
    /// `writev` from the record itself when it is a buffer's size or more
    /// (the multi-block record here): the file holds the same frames.
    #[test]
    fn round_trip_through_the_real_file_system() {
        let recs = sample();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l");
        let fs = CountingFs::new(Arc::new(crate::fs::StdFs));
        let mut w = LogWriter::new(fs.create(&p, IoClass::Journal).unwrap());
        for r in &recs {
            w.add_record(r).unwrap();
        }
        w.sync().unwrap();
        let data = crate::fs::StdFs.read_all(&p).unwrap();
        assert!(data == write(&recs), "the same bytes as through MemFs");
        let bodies: Vec<_> = read_log(&data)
            .records
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        assert_eq!(bodies, recs);
    }

    #[test]
    fn every_truncation_is_a_torn_tail_with_a_prefix_of_records() {
        let recs = sample();
        let data = write(&recs);
        for cut in (0..data.len()).step_by(97).chain([data.len() - 1]) {
            let got = read_log(&data[..cut]);
            assert!(got.damage.is_empty(), "cut {cut}: {:?}", got.damage);
            let n = got.records.len();
            for (i, (_, r)) in got.records.iter().enumerate() {
                assert_eq!(r, &recs[i], "cut {cut}");
            }
            assert!(n < recs.len());
        }
    }

    #[test]
    fn damage_in_the_middle_is_reported_not_torn() {
        let recs = sample();
        let mut data = write(&recs);
        data[10] ^= 0x40; // inside the first fragments of block 0
        let got = read_log(&data);
        assert!(!got.damage.is_empty());
        assert_eq!(got.torn_tail_at, None);
        // Records in later blocks still parse.
        assert_eq!(got.records.last().unwrap().1, b"tail");
    }

    #[test]
    fn damage_in_the_last_record_is_a_torn_tail() {
        let recs = sample();
        let mut data = write(&recs);
        let n = data.len();
        data[n - 2] ^= 1;
        let got = read_log(&data);
        assert!(got.damage.is_empty());
        assert!(got.torn_tail_at.is_some());
        assert_eq!(got.records.len(), recs.len() - 1);
    }
}
