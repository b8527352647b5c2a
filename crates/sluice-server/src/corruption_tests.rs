//! Damage read back from the engine is the engine's `Corruption`, never
//! the user's bad input, a panic or a wrong value. Each test writes a
//! collection through the commands, damages its stored bytes through the
//! engine's API (the bytes a torn or flipped write could leave), and runs
//! the commands that read them. Before this was so, a malformed record or
//! element key was an `InvalidArgument`, a malformed score read as "no
//! member" (`ZSCORE`), as 0 (`ZSCAN`) or vanished (`DUMP`), a short score
//! index key panicked, and a list missing a position answered nil or a
//! shorter `LRANGE`.

use crate::store::{data_key, list_seq, zset_member_key, Keyspace, Meta, Rec, Txn};
use crate::testutil::{command, keyspace};

fn meta(ks: &Keyspace, key: &[u8]) -> Meta {
    match Txn::new(ks).rec(key).unwrap() {
        Some(Rec::Coll(m)) => m,
        other => panic!("{key:?} holds {other:?}"),
    }
}

/// `args` fails with a reply naming corruption in the database and
/// `what` (part of the reason).
fn assert_corruption_reply(ks: &Keyspace, args: &[&[u8]], what: &str) {
    let shown: Vec<_> = args.iter().map(|a| String::from_utf8_lossy(a)).collect();
    match command(ks, args) {
        Ok(reply) => panic!(
            "{shown:?} answered {:?}, not an error",
            String::from_utf8_lossy(&reply)
        ),
        Err(e) => {
            assert!(
                e.starts_with("ERR sluicedb: corruption in /db at offset 0: server keyspace: "),
                "{shown:?}: {e}"
            );
            assert!(e.contains(what), "{shown:?}: {e} does not name {what:?}");
        }
    }
}

fn fill(ks: &Keyspace, cmd: &[u8], key: &[u8], items: &[&[u8]]) {
    let mut args = vec![cmd, key];
    args.extend_from_slice(items);
    command(ks, &args).unwrap();
}

#[test]
fn a_malformed_collection_record_is_corruption() {
    let ks = keyspace();
    fill(&ks, b"hset", b"h", &[b"f", b"v"]);
    fill(&ks, b"rpush", b"l", &[b"a", b"b"]);
    // A record cut short, and a list record whose count disagrees with
    // its positions (count 5, head 0, tail 2).
    ks.db().put(data_key(0, b"h"), [2, 1, 0, 0]).unwrap();
    let mut list = meta(&ks, b"l").encode();
    list[18] = 5;
    ks.db().put(data_key(0, b"l"), list).unwrap();
    for key in [&b"h"[..], b"l"] {
        let e = Txn::new(&ks).rec(key).unwrap_err();
        assert!(e.is_corruption(), "{e}");
    }
    let what = "the collection record of \"h\" is malformed";
    for args in [
        &[&b"hget"[..], b"h", b"f"][..],
        &[b"hgetall", b"h"],
        &[b"type", b"h"],
        &[b"del", b"h"],
        &[b"hset", b"h", b"f", b"w"],
    ] {
        assert_corruption_reply(&ks, args, what);
    }
    for args in [&[&b"lrange"[..], b"l", b"0", b"-1"][..], &[b"llen", b"l"]] {
        assert_corruption_reply(&ks, args, "the collection record of \"l\" is malformed");
    }
    // A string record with an unknown tag.
    ks.db().put(data_key(0, b"s"), [9, b'x']).unwrap();
    assert_corruption_reply(&ks, &[b"get", b"s"], "the value of \"s\"");
}

#[test]
fn a_malformed_hash_field_key_is_corruption() {
    let ks = keyspace();
    let fields: Vec<Vec<u8>> = (0..200).map(|i| format!("f{i}").into_bytes()).collect();
    let mut args: Vec<&[u8]> = Vec::new();
    for f in &fields {
        args.extend([&f[..], b"v"]);
    }
    fill(&ks, b"hset", b"h", &args);
    // A field key whose name hash is not its name's.
    let m = meta(&ks, b"h");
    let mut forged = m.prefix();
    forged.extend_from_slice(&[0, 0, 0, 0]);
    forged.extend_from_slice(b"forged");
    ks.db().put(&forged, b"v").unwrap();
    let what = format!("the element key {}", crate::store::hex(&forged));
    for args in [
        &[&b"hgetall"[..], b"h"][..],
        &[b"hkeys", b"h"],
        &[b"hscan", b"h", b"0", b"count", b"1000"],
        &[b"dump", b"h"],
        &[b"copy", b"h", b"h2"],
    ] {
        assert_corruption_reply(&ks, args, &what);
    }
}

#[test]
fn a_malformed_score_or_score_index_key_is_corruption_not_a_panic() {
    let ks = keyspace();
    fill(&ks, b"zadd", b"z", &[b"1", b"a", b"2", b"b", b"3", b"c"]);
    let m = meta(&ks, b"z");
    // Member a's score cut to 3 bytes.
    let rec = zset_member_key(&m, b"a");
    ks.db().put(&rec, [1, 2, 3]).unwrap();
    let what = "the score of sorted-set member record";
    for args in [
        &[&b"zscore"[..], b"z", b"a"][..],
        &[b"zmscore", b"z", b"a", b"b"],
        &[b"zincrby", b"z", b"1", b"a"],
        &[b"zscan", b"z", b"0"],
        &[b"dump", b"z"],
    ] {
        assert_corruption_reply(&ks, args, what);
    }
    // A score index entry too short to hold a score, first in the index.
    let short = m.elem(&[crate::store::ZSET_INDEX, 0]);
    ks.db().put(&short, b"").unwrap();
    let what = format!("the element key {}", crate::store::hex(&short));
    for args in [
        &[&b"zrange"[..], b"z", b"0", b"-1"][..],
        &[b"zrangebyscore", b"z", b"-inf", b"+inf"],
        &[b"zrank", b"z", b"b"],
        &[b"zpopmin", b"z"],
        &[b"zrandmember", b"z", b"2"],
    ] {
        assert_corruption_reply(&ks, args, &what);
    }
}

#[test]
fn a_list_missing_a_position_or_holding_a_stray_key_is_corruption() {
    let ks = keyspace();
    fill(&ks, b"rpush", b"l", &[b"a", b"b", b"c", b"d"]);
    let m = meta(&ks, b"l");
    // Position 1 gone: LINDEX answered nil, LRANGE three elements.
    ks.db().delete(m.elem(&list_seq(m.head + 1))).unwrap();
    // Some paths find position 2 where 1 belongs, others 1 missing.
    let what = "position 1";
    for args in [
        &[&b"lindex"[..], b"l", b"1"][..],
        &[b"lrange", b"l", b"0", b"-1"],
        &[b"lrange", b"l", b"1", b"1"],
        &[b"dump", b"l"],
        &[b"sort", b"l", b"alpha"],
        &[b"lpos", b"l", b"d"],
    ] {
        assert_corruption_reply(&ks, args, what);
    }
    // Position 1 back, and a key between positions 2 and 3.
    ks.db().put(m.elem(&list_seq(m.head + 1)), b"b").unwrap();
    assert_eq!(
        command(&ks, &[b"lrange", b"l", b"0", b"-1"]).unwrap(),
        b"*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"
    );
    let mut stray = m.elem(&list_seq(m.head + 2));
    stray.push(0);
    ks.db().put(&stray, b"x").unwrap();
    let what = format!(
        "list element key {} where position 3",
        crate::store::hex(&stray)
    );
    for args in [
        &[&b"lrange"[..], b"l", b"0", b"-1"][..],
        &[b"lrange", b"l", b"2", b"3"],
        &[b"lpos", b"l", b"d"],
    ] {
        assert_corruption_reply(&ks, args, &what);
    }
    assert_corruption_reply(&ks, &[b"copy", b"l", b"l2"], &what);
}

/// A `RESTORE` payload is the client's input, not damage: a bad one is
/// refused with redis-server's words, as before.
#[test]
fn a_bad_restore_payload_is_still_the_users_error() {
    let ks = keyspace();
    let e = command(&ks, &[b"restore", b"k", b"0", b"\x0b\x00junk"]).unwrap_err();
    assert_eq!(e, "ERR DUMP payload version or checksum are wrong");
}
