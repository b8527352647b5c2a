//! Keyspace format 1 at open: converts the element keys of a database
//! written before it (`docs/format/server-keyspace.md`, "Migration").
//!
//! Before format 1 an element key was `'e' | version u64 BE | suffix`
//! and a hash field or sorted-set member record held its name unhashed. Versions are reserved from 0 upwards, so every old key has a
//! 0 after the tag (versions below 2^56), and no new key does (its byte
//! there is a length, 1..=8): the two layouts never share a key.
//!
//! The conversion walks the collection records and rewrites each
//! collection's old keys in batches; each batch deletes old keys and puts
//! their new ones atomically, and is synced, so a crash between batches
//! leaves every element in exactly one layout and the next open goes on.
//! Old keys no record holds (garbage not yet reclaimed) are unreachable
//! and are deleted. The format key ([`KEYSPACE_FORMAT_KEY`]) is written
//! last: a database that has it holds no old key. This build writes it
//! with every version reservation, so a database without it that
//! reserved versions was written before format 1.

use sluicedb::{Db, WriteBatch, WriteOptions};

use crate::store::{
    hex, reserved_versions, split_data_key, zset_member_key, CollKind, Damage, Meta, Rec, Result,
    DATA_TAG, ELEMENT_TAG, KEYSPACE_FORMAT, KEYSPACE_FORMAT_KEY, ZSET_INDEX, ZSET_MEMBER,
};

/// Old element keys converted (or deleted) per batch.
pub const MIGRATE_BATCH_KEYS: usize = 1000;

/// Collection records read per pass over the data keys.
const RECORDS_PER_PASS: usize = 1000;

/// Versions below this were written as `'e' | 0x00 | 7 bytes` before
/// format 1; a database that reserved any past it cannot be told apart.
const OLD_VERSIONS_END: u64 = 1 << 56;

/// Brings the keyspace of `db` to [`KEYSPACE_FORMAT`]; returns how many
/// old element keys it converted or deleted. Call it before serving:
/// nothing else may write meanwhile.
pub fn ensure_format(db: &Db) -> Result<u64> {
    Ok(migrate(db, MIGRATE_BATCH_KEYS, usize::MAX)?.0)
}

/// [`ensure_format`] in batches of `batch_keys`, stopping after
/// `max_batches` (a crash there, for tests): (keys done, finished).
pub(crate) fn migrate(db: &Db, batch_keys: usize, max_batches: usize) -> Result<(u64, bool)> {
    match db.get(KEYSPACE_FORMAT_KEY)? {
        Some(f) if f == [KEYSPACE_FORMAT] => return Ok((0, true)),
        Some(f) => {
            return Err(sluicedb::Error::InvalidArgument(format!(
                "the keyspace format {f:?} is not one this build reads ({KEYSPACE_FORMAT})"
            )))
        }
        None => {}
    }
    // The format key is written with every version reservation: without
    // either, no collection was ever made, and there is nothing to do.
    let Some(reserved) = reserved_versions(db)? else {
        return Ok((0, true));
    };
    if reserved > OLD_VERSIONS_END {
        return Err(sluicedb::Error::InvalidArgument(format!(
            "{reserved} versions reserved before keyspace format {KEYSPACE_FORMAT}: \
             their element keys cannot be told from the new layout's"
        )));
    }
    let mut run = Run {
        db,
        batch_keys,
        batches_left: max_batches,
        done: 0,
    };
    if old_keys_left(db)? {
        let mut from = vec![DATA_TAG];
        loop {
            let colls = records_from(db, &from)?;
            let Some((last, _)) = colls.last() else {
                break;
            };
            from = last.clone();
            from.push(0);
            for (_, m) in &colls {
                if !run.convert(m)? {
                    return Ok((run.done, false));
                }
            }
        }
        // What is left no record holds: unreachable garbage.
        if !run.delete_rest()? {
            return Ok((run.done, false));
        }
    }
    db.write_opt(&WriteOptions::synced(), {
        let mut b = WriteBatch::new();
        b.put(KEYSPACE_FORMAT_KEY, [KEYSPACE_FORMAT]);
        b
    })?;
    Ok((run.done, true))
}

/// Whether any element key of the old layout is left.
fn old_keys_left(db: &Db) -> Result<bool> {
    Ok(db
        .range(vec![ELEMENT_TAG, 0]..vec![ELEMENT_TAG, 1])
        .next()
        .transpose()?
        .is_some())
}

/// Up to [`RECORDS_PER_PASS`] collection records from data key `from`:
/// (data key, metadata).
fn records_from(db: &Db, from: &[u8]) -> Result<Vec<(Vec<u8>, Meta)>> {
    let mut out = Vec::new();
    for pair in db.range(from.to_vec()..vec![DATA_TAG + 1]) {
        let (k, v) = pair?;
        let Some((_, key)) = split_data_key(0, &k) else {
            continue;
        };
        if let Rec::Coll(m) = Rec::decode(v, key).map_err(|d| d.in_db(db))? {
            out.push((k, m));
            if out.len() == RECORDS_PER_PASS {
                break;
            }
        }
    }
    Ok(out)
}

/// `'e' | version u64 BE`: an old element prefix.
fn old_prefix(version: u64) -> Vec<u8> {
    let mut k = vec![ELEMENT_TAG];
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// The new key of the old element key with `suffix`, of collection `m`.
fn new_key(m: &Meta, suffix: &[u8]) -> Option<Vec<u8>> {
    Some(match m.kind {
        CollKind::Hash | CollKind::Set => m.named(suffix),
        CollKind::List => m.elem(suffix),
        CollKind::ZSet => match *suffix.first()? {
            ZSET_MEMBER => zset_member_key(m, &suffix[1..]),
            ZSET_INDEX => m.elem(suffix),
            _ => return None,
        },
    })
}

struct Run<'a> {
    db: &'a Db,
    batch_keys: usize,
    batches_left: usize,
    done: u64,
}

impl Run<'_> {
    /// Writes one batch (synced); false once the batches allowed are used.
    fn write(&mut self, batch: WriteBatch) -> Result<bool> {
        if self.batches_left == 0 {
            return Ok(false);
        }
        self.batches_left -= 1;
        self.db.write_opt(&WriteOptions::synced(), batch)?;
        Ok(true)
    }

    /// Converts the old keys of collection `m`; false if stopped.
    fn convert(&mut self, m: &Meta) -> Result<bool> {
        if m.version >= OLD_VERSIONS_END {
            return Ok(true);
        }
        let (lo, hi) = (old_prefix(m.version), old_prefix(m.version + 1));
        loop {
            let mut batch = WriteBatch::new();
            for pair in self.db.range(lo.clone()..hi.clone()).limit(self.batch_keys) {
                let (k, v) = pair?;
                let nk = new_key(m, &k[lo.len()..]).ok_or_else(|| {
                    Damage(format!(
                        "the element key {} is not in the old layout",
                        hex(&k)
                    ))
                    .in_db(self.db)
                })?;
                batch.delete(&k);
                batch.put(nk, v);
            }
            if batch.is_empty() {
                return Ok(true);
            }
            let n = batch.len() as u64 / 2;
            if !self.write(batch)? {
                return Ok(false);
            }
            self.done += n;
        }
    }

    /// Deletes the old keys no record holds; false if stopped.
    fn delete_rest(&mut self) -> Result<bool> {
        loop {
            let mut batch = WriteBatch::new();
            for pair in self
                .db
                .range(vec![ELEMENT_TAG, 0]..vec![ELEMENT_TAG, 1])
                .limit(self.batch_keys)
            {
                batch.delete(pair?.0);
            }
            if batch.is_empty() {
                return Ok(true);
            }
            let n = batch.len() as u64;
            if !self.write(batch)? {
                return Ok(false);
            }
            self.done += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use bytes::Bytes;
    use sluicedb::fs::MemFs;
    use sluicedb::Options;

    use super::*;
    use crate::resp::Out;
    use crate::store::{name_of, split_element_key, Fsync, Keyspace, Txn, GARBAGE_TAG};

    fn open(fs: &MemFs) -> Keyspace {
        let o = Options::default().fs(Arc::new(fs.clone()));
        Keyspace::new(Db::open("/db", o).unwrap(), Fsync::No).unwrap()
    }

    /// Runs one collection command on `args[1]` and commits it: its reply.
    fn command(ks: &Keyspace, args: &[&[u8]]) -> Vec<u8> {
        let mut held = ks.lock_keys(&[args[1]]);
        let mut txn = Txn::new(ks);
        let mut out = Out::default();
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        let r = match crate::hash::run(&name, &args, &mut txn, &mut out) {
            Some(r) => r,
            None => match crate::set::run(&name, &args, &mut txn, &mut out) {
                Some(r) => r,
                None => match crate::zset::run(&name, &args, &mut txn, &mut out) {
                    Some(r) => r,
                    None => crate::list::run(&name, &args, &mut txn, &mut out)
                        .unwrap_or_else(|| panic!("{name} is not a collection command")),
                },
            },
        };
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
        txn.commit(&mut held).unwrap();
        out.buf.to_vec()
    }

    fn run(ks: &Keyspace, line: &str) -> Vec<u8> {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        command(ks, &args)
    }

    /// A hash, a set, a sorted set and a list whose names share long
    /// prefixes, and the elements of a deleted set, not yet reclaimed.
    fn populate(ks: &Keyspace) {
        for i in 0..20 {
            run(ks, &format!("HSET h field:{i:04} value{i}"));
            run(ks, &format!("SADD s element:{i:06} element:{:06}", i + 20));
            run(ks, &format!("ZADD z {} member:{i:04}", i % 7));
        }
        run(ks, "RPUSH l a b c d e f g");
        run(ks, "LPUSH l z y");
        run(ks, "SADD dead x1 x2 x3 x4 x5 x6 x7 x8 x9");
        let mut held = ks.lock_keys(&[b"dead"]);
        let mut txn = Txn::new(ks);
        txn.delete(b"dead");
        txn.commit(&mut held).unwrap();
    }

    /// What the commands answer about the collections.
    fn answers(ks: &Keyspace) -> Vec<Vec<u8>> {
        [
            "HGETALL h",
            "HGET h field:0007",
            "HLEN h",
            "HSCAN h 0 COUNT 5",
            "SMEMBERS s",
            "SISMEMBER s element:000031",
            "SCARD s",
            "SSCAN s 0 MATCH element:00001*",
            "SINTER s s",
            "ZRANGE z 0 -1 WITHSCORES",
            "ZSCORE z member:0013",
            "ZRANGEBYLEX z - +",
            "ZSCAN z 0",
            "ZRANK z member:0005",
            "LRANGE l 0 -1",
            "LINDEX l 3",
            "SCARD dead",
        ]
        .iter()
        .map(|line| run(ks, line))
        .collect()
    }

    /// Rewrites every element key in the layout before format 1 (the
    /// version as 8 bytes, names unhashed), through the engine, and drops
    /// the format key: a database an earlier build wrote.
    fn downgrade(ks: &Keyspace) {
        let db = ks.db();
        let mut kinds = BTreeMap::new();
        for pair in db.range(vec![DATA_TAG]..vec![DATA_TAG + 1]) {
            let (k, v) = pair.unwrap();
            let (_, key) = split_data_key(0, &k).unwrap();
            if let Rec::Coll(m) = Rec::decode(v, key).unwrap() {
                kinds.insert(m.version, m.kind);
            }
        }
        let mut batch = WriteBatch::new();
        for pair in db.range(vec![ELEMENT_TAG]..vec![ELEMENT_TAG + 1]) {
            let (k, v) = pair.unwrap();
            let (version, at) = split_element_key(&k).unwrap();
            let suffix = &k[at..];
            // The deleted set's version has no record: a set.
            let old_suffix = match kinds.get(&version).copied().unwrap_or(CollKind::Set) {
                CollKind::Hash => name_of(suffix).unwrap().to_vec(),
                CollKind::ZSet if suffix[0] == ZSET_MEMBER => {
                    [&[ZSET_MEMBER][..], name_of(&suffix[1..]).unwrap()].concat()
                }
                _ => suffix.to_vec(),
            };
            batch.delete(&k);
            batch.put([old_prefix(version), old_suffix].concat(), v);
        }
        batch.delete(KEYSPACE_FORMAT_KEY);
        db.write_opt(&WriteOptions::synced(), batch).unwrap();
    }

    /// The old database: populated, its answers, downgraded.
    fn old_database() -> (MemFs, Vec<Vec<u8>>) {
        let fs = MemFs::new();
        let ks = open(&fs);
        populate(&ks);
        let want = answers(&ks);
        assert!(ks.check().unwrap().is_empty());
        downgrade(&ks);
        assert!(old_keys_left(&ks.db()).unwrap());
        (fs, want)
    }

    /// Opened, the keyspace is in format 1, consistent, answers as before
    /// the downgrade, and the deleted set's elements are gone.
    fn assert_converted(ks: &Keyspace, want: &[Vec<u8>], what: &str) {
        let db = ks.db();
        assert!(!old_keys_left(&db).unwrap(), "{what}: old keys left");
        assert_eq!(
            db.get(KEYSPACE_FORMAT_KEY).unwrap(),
            Some(vec![KEYSPACE_FORMAT]),
            "{what}"
        );
        assert_eq!(ks.check().unwrap(), Vec::<String>::new(), "{what}");
        assert!(answers(ks) == want, "{what}: the answers changed");
        while ks.reclaim(usize::MAX).unwrap() > 0 {}
        let garbage = db.range(vec![GARBAGE_TAG]..vec![GARBAGE_TAG + 1]).count();
        assert_eq!(garbage, 0, "{what}: garbage left");
        let elements = db.range(vec![ELEMENT_TAG]..vec![ELEMENT_TAG + 1]).count();
        // 20 fields, 40 members, 20 members with their index entries, 9
        // list elements: one key each.
        assert_eq!(
            elements,
            20 + 40 + 40 + 9,
            "{what}: lost or duplicated elements"
        );
    }

    #[test]
    fn a_database_in_the_old_layout_converts_at_open() {
        let (fs, want) = old_database();
        let ks = open(&fs);
        assert_converted(&ks, &want, "converted");
        // Written after the conversion, and opened again: nothing to do.
        run(&ks, "SADD s element:999999");
        drop(ks);
        let ks = open(&fs);
        assert_eq!(run(&ks, "SCARD s"), b":41\r\n");
    }

    /// `HSCAN`/`SSCAN`/`ZSCAN` cursors handed out before the conversion
    /// carry over: the old layout kept names unhashed, in name order, and
    /// an old build's cursor held 1 + (a name's length up to 7 in the top
    /// byte, then its first 7 bytes). Resumed in the hashed order of
    /// format 1, such a cursor skipped every element whose name hash sorts
    /// below those bytes; now it starts again, and every element comes back.
    #[test]
    fn scan_cursors_from_before_the_conversion_miss_no_element() {
        let fs = MemFs::new();
        let ks = open(&fs);
        // 7 distinct leading bytes per name, past the one-call size.
        let names: Vec<String> = (0..300).map(|i| format!("{i:03}:name")).collect();
        for chunk in names.chunks(100) {
            let fields: Vec<String> = chunk.iter().map(|n| format!("{n} v")).collect();
            run(&ks, &format!("HSET bigh {}", fields.join(" ")));
            run(&ks, &format!("SADD bigs {}", chunk.join(" ")));
            let members: Vec<String> = chunk.iter().map(|n| format!("1 {n}")).collect();
            run(&ks, &format!("ZADD bigz {}", members.join(" ")));
        }
        downgrade(&ks);
        drop(ks);
        // The old build's first call with COUNT 100 returned the first 100
        // names in name order and a cursor at the 101st.
        let first = &names[100].as_bytes()[..7];
        let mut b = [7u8; 8];
        b[1..].copy_from_slice(first);
        let old_cursor = u64::from_be_bytes(b) + 1;
        let ks = open(&fs);
        for (cmd, key, per) in [
            ("HSCAN", "bigh", 2),
            ("SSCAN", "bigs", 1),
            ("ZSCAN", "bigz", 2),
        ] {
            let mut got: std::collections::BTreeSet<Vec<u8>> =
                names[..100].iter().map(|n| n.as_bytes().to_vec()).collect();
            let mut cursor = old_cursor;
            for _ in 0..1000 {
                let (next, items) = crate::testutil::scan_reply(&run(
                    &ks,
                    &format!("{cmd} {key} {cursor} COUNT 10"),
                ));
                got.extend(items.into_iter().step_by(per));
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            assert_eq!(cursor, 0, "{cmd}: the scan did not end");
            let missed: Vec<&String> = names
                .iter()
                .filter(|n| !got.contains(n.as_bytes()))
                .collect();
            assert!(
                missed.is_empty(),
                "{cmd} missed {} elements: {missed:?}",
                missed.len()
            );
        }
    }

    /// A conversion stopped after k batches (a crash between them) is
    /// finished by the next open, for every k.
    #[test]
    fn a_conversion_stopped_after_any_batch_finishes_at_the_next_open() {
        let (fs, want) = old_database();
        for k in 0.. {
            let image = fs.crash_image();
            let o = Options::default().fs(Arc::new(image.clone()));
            let (_, finished) = migrate(&Db::open("/db", o).unwrap(), 7, k).unwrap();
            assert_converted(&open(&image), &want, &format!("stopped after {k} batches"));
            if finished {
                break;
            }
        }
    }

    /// A crash at any file operation of the conversion (the fault-injecting
    /// file system's image after each) leaves a database the next open
    /// converts, with no element lost or duplicated.
    #[test]
    fn a_crash_anywhere_in_the_conversion_loses_no_element() {
        let (fs, want) = old_database();
        let image = fs.crash_image();
        let o = Options::default().fs(Arc::new(image.clone()));
        let db = Db::open("/db", o).unwrap();
        image.capture_images(false);
        let (_, finished) = migrate(&db, 7, usize::MAX).unwrap();
        assert!(finished);
        let images = image.take_images();
        assert!(images.len() > 20, "{} crash points", images.len());
        for (op, crashed) in images {
            assert_converted(&open(&crashed), &want, &format!("crashed after op {op}"));
        }
    }
}
