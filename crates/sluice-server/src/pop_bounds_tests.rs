//! Pop bounds kept in a set's or sorted set's record
//! (`docs/format/server-keyspace.md`, "Pop bounds"): read back after a
//! restart they skip the tombstones of the members popped before, and
//! an insert below (or above) them widens them in its own batch.

use std::sync::Arc;

use sluicedb::fs::MemFs;
use sluicedb::{Db, Options, WriteBatch};

use crate::store::{zset_index_suffix, CollKind, Fsync, Keyspace, Meta, Rec, Txn};
use crate::testutil::command;

fn open(fs: &MemFs) -> Keyspace {
    let o = Options::default().fs(Arc::new(fs.clone()));
    Keyspace::new(Db::open("/db", o).unwrap(), Fsync::No).unwrap()
}

fn run(ks: &Keyspace, line: &str) -> String {
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    match command(ks, &args) {
        Ok(r) => String::from_utf8_lossy(&r).into_owned(),
        Err(e) => format!("-{e}"),
    }
}

fn meta(ks: &Keyspace, key: &[u8]) -> Meta {
    match ks.read(0, key, 0).unwrap() {
        Some(Rec::Coll(m)) => m,
        r => panic!("{r:?}"),
    }
}

/// A sorted set of `n` members `m0..`, scores 0.., and the first `popped`
/// of them popped; the database closed.
fn popped_zset(fs: &MemFs, n: usize, popped: usize) {
    let ks = open(fs);
    let mut line = "ZADD z".to_owned();
    for i in 0..n {
        line += &format!(" {i} m{i}");
    }
    assert_eq!(run(&ks, &line), format!(":{n}\r\n"));
    assert_eq!(
        run(&ks, &format!("ZPOPMIN z {popped}"))
            .matches("\r\n$")
            .count(),
        2 * popped
    );
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
}

/// After a restart the first `ZPOPMIN` starts at the record's bound, not
/// at the index's start: an index entry planted below the bound (which
/// no live member has, so no command could have left it there) is not
/// read, where a walk from the start would pop it first.
#[test]
fn a_bound_read_back_after_reopen_skips_the_popped_members() {
    let fs = MemFs::new();
    popped_zset(&fs, 1000, 600);
    let ks = open(&fs);
    let m = meta(&ks, b"z");
    let want = [zset_index_suffix(599.0, b"m599"), vec![0]].concat();
    assert_eq!(
        m.pop_lo,
        Some(want),
        "the last pop's bound is in the record"
    );
    assert_eq!(Txn::new(&ks).pop_bound(&m, false), m.pop_bound_key(false));
    let mut b = WriteBatch::new();
    b.put(m.elem(&zset_index_suffix(0.5, b"planted")), []);
    ks.db().write(b).unwrap();
    assert_eq!(run(&ks, "ZPOPMIN z"), "*2\r\n$4\r\nm600\r\n$3\r\n600\r\n");
    assert_eq!(run(&ks, "ZRANGE z 0 0"), "*1\r\n$4\r\nm601\r\n");
}

/// A member added below a record's bound (new, or moved there by a score
/// change) widens the bound in the batch that adds it: after a restart,
/// with no bound in memory, the pops and the index reads still find it.
/// (Trusting the bound without widening it would pop `m601` first.)
#[test]
fn a_member_added_below_a_kept_bound_is_found_after_a_restart() {
    let fs = MemFs::new();
    popped_zset(&fs, 1000, 600);
    let ks = open(&fs);
    assert_eq!(run(&ks, "ZADD z 1.5 low 500 m999"), ":1\r\n");
    assert_eq!(run(&ks, "ZPOPMAX z"), "*2\r\n$4\r\nm998\r\n$3\r\n998\r\n");
    assert_eq!(run(&ks, "ZADD z 5000 high"), ":1\r\n");
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    drop(ks);
    let ks = open(&fs);
    assert_eq!(
        run(&ks, "ZRANGE z 0 1"),
        "*2\r\n$3\r\nlow\r\n$4\r\nm999\r\n"
    );
    assert_eq!(run(&ks, "ZRANGE z 0 0 REV"), "*1\r\n$4\r\nhigh\r\n");
    assert_eq!(run(&ks, "ZRANK z m600"), ":2\r\n");
    assert_eq!(run(&ks, "ZPOPMIN z"), "*2\r\n$3\r\nlow\r\n$3\r\n1.5\r\n");
    assert_eq!(run(&ks, "ZPOPMIN z"), "*2\r\n$4\r\nm999\r\n$3\r\n500\r\n");
    assert_eq!(run(&ks, "ZPOPMAX z"), "*2\r\n$4\r\nhigh\r\n$4\r\n5000\r\n");
    assert_eq!(run(&ks, "ZCARD z"), ":398\r\n");
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
}

/// A set popped while large keeps its members' bounds in its record;
/// after a restart `SPOP` still returns every member exactly once,
/// members added below and above the bounds among them.
#[test]
fn a_popped_set_keeps_its_bounds_and_loses_no_member_across_restarts() {
    let fs = MemFs::new();
    let ks = open(&fs);
    let mut line = "SADD s".to_owned();
    for i in 0..3000 {
        line += &format!(" m{i:05}");
    }
    assert_eq!(run(&ks, &line), ":3000\r\n");
    let mut popped = std::collections::BTreeSet::new();
    for _ in 0..2000 {
        let r = run(&ks, "SPOP s");
        assert!(popped.insert(r), "popped twice");
    }
    let m = meta(&ks, b"s");
    assert!(m.pop_lo.is_some() || m.pop_hi.is_some(), "{m:?}");
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    drop(ks);
    let ks = open(&fs);
    assert_eq!(run(&ks, "SADD s a zz"), ":2\r\n");
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    drop(ks);
    let ks = open(&fs);
    for _ in 0..1002 {
        let r = run(&ks, "SPOP s");
        assert!(r.starts_with('$') && r != "$-1\r\n", "{r}");
        assert!(popped.insert(r), "popped twice");
    }
    assert_eq!(run(&ks, "EXISTS s"), ":0\r\n");
    assert!(popped.contains("$1\r\na\r\n") && popped.contains("$2\r\nzz\r\n"));
}

/// The record with bounds, as the format document draws it, and a
/// record without them (every database written before) decodes as
/// having none.
#[test]
fn bounds_encode_as_documented() {
    let mut m = Meta {
        kind: CollKind::ZSet,
        expire_at_ms: None,
        version: 5,
        count: 2,
        head: 0,
        tail: 0,
        pop_lo: None,
        pop_hi: None,
    };
    let plain = m.encode();
    assert_eq!(plain.len(), crate::store::META_BYTES);
    m.pop_lo = Some([zset_index_suffix(3.0, b"c"), vec![0]].concat());
    let raw = m.encode();
    let mut want = plain.clone();
    want.extend([11, 0x01, 0xc0, 0x08, 0, 0, 0, 0, 0, 0, b'c', 0]);
    want.push(0);
    assert_eq!(raw, want);
    let back = Rec::decode(raw, b"z").unwrap();
    assert_eq!(back, Rec::Coll(m.clone()));
    let old = Rec::decode(plain, b"z").unwrap();
    assert!(matches!(
        old,
        Rec::Coll(Meta {
            pop_lo: None,
            pop_hi: None,
            ..
        })
    ));
    // A sorted set's bound outside its score index is damage.
    let mut bad = m.clone();
    bad.pop_lo = Some(vec![0x00, 1]);
    assert!(Rec::decode(bad.encode(), b"z").is_err());
    // A start longer than kept is cut (still a start); a long end is dropped.
    m.pop_lo = Some(vec![0x01; 300]);
    m.pop_hi = Some(vec![0x01; 300]);
    let Ok(Rec::Coll(cut)) = Rec::decode(m.encode(), b"z") else {
        panic!()
    };
    assert_eq!(cut.pop_lo, Some(vec![0x01; 255]));
    assert_eq!(cut.pop_hi, None);
    assert!(m.encode().len() <= crate::store::META_MAX_BYTES);
}
