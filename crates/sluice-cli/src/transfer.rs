//! `sluice export` and `sluice import`: a database's pairs as one stream,
//! in the checksummed export format (`docs/format/export.md`) or as JSON
//! lines for people and other tools.

use std::io::{BufRead, Write};

use sluicedb::{Db, WriteBatch};

/// The first eight bytes of an export stream (format version 1).
pub const MAGIC: &[u8; 8] = b"SLCEXP01";
/// A pair record follows.
const TAG_PAIR: u8 = 1;
/// The end record: the count of pairs before it.
const TAG_END: u8 = 0;
/// Bytes of pairs an import gathers into one write batch.
const IMPORT_BATCH_BYTES: usize = 1 << 20;
/// The largest key or value length an import accepts from a stream: a
/// damaged length fails here rather than allocate gigabytes.
const MAX_FIELD_BYTES: u64 = 1 << 30;

/// How pairs are written or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The export format: binary, length-prefixed, a CRC-32C per record.
    Binary,
    /// One JSON object per line: `{"key": "...", "value": "..."}`, with
    /// `key_hex` / `value_hex` instead for bytes that are not UTF-8.
    JsonLines,
}

impl Format {
    pub fn from_name(s: &str) -> Result<Format, String> {
        match s {
            "binary" => Ok(Format::Binary),
            "jsonl" => Ok(Format::JsonLines),
            _ => Err(format!("--format: {s:?} is neither binary nor jsonl")),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes `pairs` to `out` in `format`; returns how many.
pub fn export(
    pairs: impl Iterator<Item = sluicedb::Result<(Vec<u8>, Vec<u8>)>>,
    format: Format,
    out: &mut dyn Write,
) -> Result<u64, String> {
    let io = |e: std::io::Error| format!("writing the export: {e}");
    let mut n = 0u64;
    let mut rec = Vec::new();
    if format == Format::Binary {
        out.write_all(MAGIC).map_err(io)?;
    }
    for pair in pairs {
        let (k, v) = pair.map_err(|e| e.to_string())?;
        rec.clear();
        match format {
            Format::Binary => {
                rec.push(TAG_PAIR);
                put_varint(&mut rec, k.len() as u64);
                put_varint(&mut rec, v.len() as u64);
                rec.extend_from_slice(&k);
                rec.extend_from_slice(&v);
                let crc = crc32c::crc32c(&rec);
                rec.extend_from_slice(&crc.to_le_bytes());
            }
            Format::JsonLines => {
                let mut line = serde_json::Map::new();
                for (name, bytes) in [("key", &k), ("value", &v)] {
                    match std::str::from_utf8(bytes) {
                        Ok(s) => line.insert(name.into(), s.into()),
                        Err(_) => line.insert(format!("{name}_hex"), hex::encode(bytes).into()),
                    };
                }
                rec = serde_json::to_vec(&line).map_err(|e| e.to_string())?;
                rec.push(b'\n');
            }
        }
        out.write_all(&rec).map_err(io)?;
        n += 1;
    }
    if format == Format::Binary {
        rec.clear();
        rec.push(TAG_END);
        rec.extend_from_slice(&n.to_le_bytes());
        let crc = crc32c::crc32c(&rec);
        rec.extend_from_slice(&crc.to_le_bytes());
        out.write_all(&rec).map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(n)
}

/// Puts the pairs of `input` into `db` in batches of about a megabyte,
/// then syncs; the format is found from the first bytes (the export
/// magic, or JSON lines). Returns how many. A damaged or truncated input
/// is an error naming the byte offset (or line) and how many pairs before
/// it were imported: an import is not atomic, and running it again
/// rewrites the same pairs.
pub fn import(input: &mut dyn BufRead, db: &Db) -> Result<u64, String> {
    let binary = input
        .fill_buf()
        .map_err(|e| e.to_string())?
        .starts_with(MAGIC);
    let mut batch = WriteBatch::new();
    let mut bytes = 0usize;
    let mut n = 0u64;
    let mut put = |k: &[u8], v: &[u8], n: &mut u64| -> Result<(), String> {
        batch.put(k, v);
        bytes += k.len() + v.len();
        *n += 1;
        if bytes >= IMPORT_BATCH_BYTES {
            db.write(std::mem::take(&mut batch))
                .map_err(|e| e.to_string())?;
            bytes = 0;
        }
        Ok(())
    };
    let r = if binary {
        import_binary(input, &mut n, &mut put)
    } else {
        import_json_lines(input, &mut n, &mut put)
    };
    let done = r.and_then(|()| {
        if !batch.is_empty() {
            db.write(batch).map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    let synced = db.sync().map_err(|e| e.to_string());
    match (done, synced) {
        (Ok(()), Ok(())) => Ok(n),
        (Err(e), _) | (Ok(()), Err(e)) => Err(format!(
            "{e} (the pairs before it were imported, up to a batch of about 1 MiB)"
        )),
    }
}

type PutFn<'a> = dyn FnMut(&[u8], &[u8], &mut u64) -> Result<(), String> + 'a;

/// Reads exactly `buf.len()` bytes, or says the stream ended at `at`.
fn read_exact_at(input: &mut dyn BufRead, buf: &mut [u8], at: u64) -> Result<(), String> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            format!("export truncated at byte {at}: no end record")
        }
        _ => format!("reading the export at byte {at}: {e}"),
    })
}

fn import_binary(input: &mut dyn BufRead, n: &mut u64, put: &mut PutFn<'_>) -> Result<(), String> {
    let mut magic = [0u8; 8];
    read_exact_at(input, &mut magic, 0)?;
    let mut at = MAGIC.len() as u64;
    let mut rec = Vec::new();
    loop {
        let start = at;
        let corrupt = |why: &str| format!("export damaged at byte {start}: {why}");
        rec.clear();
        let mut tag = [0u8; 1];
        read_exact_at(input, &mut tag, at)?;
        rec.push(tag[0]);
        at += 1;
        match tag[0] {
            TAG_END => {
                let mut count = [0u8; 8];
                read_exact_at(input, &mut count, at)?;
                rec.extend_from_slice(&count);
                let mut crc = [0u8; 4];
                read_exact_at(input, &mut crc, at + 8)?;
                if crc32c::crc32c(&rec) != u32::from_le_bytes(crc) {
                    return Err(corrupt("end record checksum mismatch"));
                }
                let count = u64::from_le_bytes(count);
                if count != *n {
                    return Err(corrupt(&format!(
                        "the end record counts {count} pairs, the stream held {n}"
                    )));
                }
                let mut rest = [0u8; 1];
                return match input.read(&mut rest) {
                    Ok(0) => Ok(()),
                    Ok(_) => Err(format!("bytes after the end record at byte {}", at + 12)),
                    Err(e) => Err(e.to_string()),
                };
            }
            TAG_PAIR => {}
            t => return Err(corrupt(&format!("unknown record tag {t}"))),
        }
        let mut lens = [0u64; 2];
        for len in &mut lens {
            let mut shift = 0;
            loop {
                let mut b = [0u8; 1];
                read_exact_at(input, &mut b, at)?;
                rec.push(b[0]);
                at += 1;
                if shift > 63 {
                    return Err(corrupt("length overflows"));
                }
                *len |= u64::from(b[0] & 0x7f) << shift;
                shift += 7;
                if b[0] < 0x80 {
                    break;
                }
            }
            if *len > MAX_FIELD_BYTES {
                return Err(corrupt(&format!("a length of {len} bytes")));
            }
        }
        let head = rec.len();
        let body = (lens[0] + lens[1]) as usize;
        rec.resize(head + body + 4, 0);
        read_exact_at(input, &mut rec[head..], at)?;
        at += body as u64 + 4;
        let (data, crc) = rec.split_at(head + body);
        if crc32c::crc32c(data) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(corrupt("pair checksum mismatch"));
        }
        let (k, v) = data[head..].split_at(lens[0] as usize);
        put(k, v, n)?;
    }
}

fn import_json_lines(
    input: &mut dyn BufRead,
    n: &mut u64,
    put: &mut PutFn<'_>,
) -> Result<(), String> {
    let field = |o: &serde_json::Map<String, serde_json::Value>, name: &str, line: usize| {
        let bad = |why: String| format!("line {line}: {why}");
        match (o.get(name), o.get(&format!("{name}_hex"))) {
            (Some(serde_json::Value::String(s)), None) => Ok(s.as_bytes().to_vec()),
            (None, Some(serde_json::Value::String(h))) => {
                hex::decode(h).map_err(|e| bad(format!("{name}_hex is not hex: {e}")))
            }
            _ => Err(bad(format!(
                "needs a string \"{name}\" or \"{name}_hex\", one of the two"
            ))),
        }
    };
    for (i, line) in input.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| format!("line {line_no}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let o: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&line)
            .map_err(|e| format!("line {line_no}: not a JSON object: {e}"))?;
        let k = field(&o, "key", line_no)?;
        let v = field(&o, "value", line_no)?;
        put(&k, &v, n)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of `docs/format/export.md`, byte for byte.
    #[test]
    fn a_pair_is_encoded_as_the_format_doc_shows() {
        let mut out = Vec::new();
        let pairs = vec![Ok((b"user:1".to_vec(), b"ada".to_vec()))];
        assert_eq!(export(pairs.into_iter(), Format::Binary, &mut out), Ok(1));
        let pair = [
            0x01, 0x06, 0x03, 0x75, 0x73, 0x65, 0x72, 0x3a, 0x31, 0x61, 0x64, 0x61, 0x09, 0x8b,
            0x65, 0x15,
        ];
        assert_eq!(&out[..8], MAGIC);
        assert_eq!(&out[8..24], &pair);
        // The end record: tag 0 and the count, 1.
        assert_eq!(out[24], 0);
        assert_eq!(&out[25..33], &1u64.to_le_bytes());
        assert_eq!(out.len(), 37);
    }
}
