//! The hash index checkpoint file (UniKV, ICDE '20, §III-G;
//! `docs/format/unikv-hash-index.md`, "Checkpoint file"): every generation
//! of every partition's hash index, each in the single-index format of
//! [`HashIndex::encode`], framed with its partition's key and covered by
//! one checksum.

use std::collections::BTreeMap;
use std::path::Path;

use super::hash_index::HashIndex;
use crate::coding::{masked_crc, put_u32, put_u64, u32_at, u64_at};
use crate::error::{Error, Result};

const FILE_MAGIC: u64 = u64::from_le_bytes(*b"SLUHIXF\x01");
const FILE_FORMAT_VERSION: u32 = 1;
/// Magic, version, generation count.
const FILE_HEADER_BYTES: usize = 8 + 4 + 4;

/// The checkpoint bytes of `all` (partition key → generations, oldest
/// first).
pub(crate) fn encode(all: &BTreeMap<Vec<u8>, Vec<HashIndex>>) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, FILE_MAGIC);
    put_u32(&mut out, FILE_FORMAT_VERSION);
    put_u32(&mut out, all.values().map(Vec::len).sum::<usize>() as u32);
    for (partition, gens) in all {
        for g in gens {
            put_u32(&mut out, partition.len() as u32);
            out.extend_from_slice(partition);
            let blob = g.encode();
            put_u32(&mut out, blob.len() as u32);
            out.extend_from_slice(&blob);
        }
    }
    let crc = masked_crc(&out);
    put_u32(&mut out, crc);
    out
}

/// Reads a checkpoint written by [`encode`]; `file` names it in errors.
/// Damage is a `Corruption` naming the offset, never a panic.
pub(crate) fn decode(data: &[u8], file: &Path) -> Result<BTreeMap<Vec<u8>, Vec<HashIndex>>> {
    let bad = |offset: usize, reason: &str| Error::corruption(file, offset as u64, reason);
    if data.len() < FILE_HEADER_BYTES + 4 {
        return Err(bad(0, "hash index checkpoint file is truncated"));
    }
    if u64_at(data, 0) != FILE_MAGIC {
        return Err(bad(0, "not a hash index checkpoint file (bad magic)"));
    }
    let version = u32_at(data, 8);
    if version != FILE_FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            file: file.into(),
            version,
        });
    }
    let body = data.len() - 4;
    if masked_crc(&data[..body]) != u32_at(data, body) {
        return Err(bad(body, "hash index checkpoint file checksum mismatch"));
    }
    let count = u32_at(data, 12);
    let mut at = FILE_HEADER_BYTES;
    // A length field at `at`, and the bytes it covers, within the body.
    let take = |at: &mut usize| -> Result<(usize, usize)> {
        if *at + 4 > body {
            return Err(bad(*at, "hash index checkpoint file ends inside a field"));
        }
        let len = u32_at(data, *at) as usize;
        let start = *at + 4;
        if len > body - start {
            return Err(bad(*at, "hash index checkpoint field runs past the end"));
        }
        *at = start + len;
        Ok((start, len))
    };
    let mut all: BTreeMap<Vec<u8>, Vec<HashIndex>> = BTreeMap::new();
    for _ in 0..count {
        let (k, klen) = take(&mut at)?;
        let (g, glen) = take(&mut at)?;
        let index = HashIndex::decode(&data[g..g + glen], file).map_err(|e| match e {
            // Offsets inside the generation, shifted to the file's.
            Error::Corruption { offset, reason, .. } => Error::corruption(
                file,
                offset + g as u64,
                format!("hash index checkpoint generation: {reason}"),
            ),
            e => e,
        })?;
        all.entry(data[k..k + klen].to_vec())
            .or_default()
            .push(index);
    }
    if at != body {
        return Err(bad(
            at,
            "hash index checkpoint file has bytes after its generations",
        ));
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BTreeMap<Vec<u8>, Vec<HashIndex>> {
        let mut all = BTreeMap::new();
        let mut a = HashIndex::new(8, 2);
        a.add_table(5, [&b"apple"[..], b"fig"]).unwrap();
        let mut b = HashIndex::new(8, 2);
        b.add_table(9, [&b"grape"[..]]).unwrap();
        let mut c = HashIndex::new(4, 4);
        c.add_table(7, [&b"plum"[..], b"quince"]).unwrap();
        all.insert(Vec::new(), vec![a, b]);
        all.insert(b"p".to_vec(), vec![c]);
        all
    }

    #[test]
    fn a_checkpoint_file_round_trips_every_partitions_generations() {
        let all = sample();
        let bytes = encode(&all);
        let back = decode(&bytes, Path::new("x.hix")).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[&b""[..]].len(), 2);
        assert_eq!(back[&b""[..]][0].tables(), &[5]);
        assert_eq!(back[&b""[..]][1].tables(), &[9]);
        assert_eq!(back[&b"p"[..]][0].tables(), &[7]);
        assert_eq!(back[&b"p"[..]][0].candidates(b"quince").as_slice(), &[7]);
        assert_eq!(encode(&back), bytes);
        let empty = encode(&BTreeMap::new());
        assert!(decode(&empty, Path::new("x.hix")).unwrap().is_empty());
    }

    #[test]
    fn damage_is_a_corruption_naming_the_file() {
        let bytes = encode(&sample());
        for cut in [0, 10, bytes.len() - 1] {
            assert!(matches!(
                decode(&bytes[..cut], Path::new("x.hix")),
                Err(Error::Corruption { .. })
            ));
        }
        // Every flipped bit is caught (by the checksum at least), and
        // never panics.
        for i in 0..bytes.len() {
            let mut d = bytes.clone();
            d[i] ^= 0x10;
            let r = decode(&d, Path::new("x.hix"));
            assert!(r.is_err(), "byte {i} flipped went unnoticed");
        }
    }
}
