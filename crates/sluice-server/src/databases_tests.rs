//! Databases 0 to 15 (`SELECT`) on one engine: each database's keys live
//! under their own prefix, database 0's exactly where they were before
//! there were others (`docs/format/server-keyspace.md`, "Databases").

use sluicedb::WriteBatch;

use crate::store::{data_key, key_hash, Keyspace, DATABASES};
use crate::testutil::{command_in, keyspace};

fn run(ks: &Keyspace, db: u8, line: &str) -> String {
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    match command_in(ks, db, &args) {
        Ok(r) => String::from_utf8_lossy(&r).into_owned(),
        Err(e) => format!("-{e}"),
    }
}

/// A data directory written by the build before databases: the bytes of
/// the format document's worked example, put through the engine's API,
/// open unchanged and read the same in database 0, and in no other.
#[test]
fn a_store_in_the_layout_before_databases_reads_the_same_in_database_0() {
    let fs = sluicedb::fs::MemFs::new();
    let options = || sluicedb::Options::default().fs(std::sync::Arc::new(fs.clone()));
    let db = sluicedb::Db::open("/db", options()).unwrap();
    let mut b = WriteBatch::new();
    let data = |key: &[u8]| [&[b'k'][..], &key_hash(key).to_be_bytes(), key].concat();
    // SET user:1 hi; HSET user:2 name ann (version 0, one field).
    b.put(data(b"user:1"), [0x00, b'h', b'i']);
    b.put(b"v", 1024u64.to_le_bytes());
    b.put(b"f", [1]);
    let mut rec = vec![0x02, 0x01];
    rec.extend([0u8; 16]);
    rec.extend(1u64.to_le_bytes());
    b.put(data(b"user:2"), rec);
    b.put([0x63], []);
    let bucket = (key_hash(b"user:2") >> 44) as u32;
    b.put([&[0x63][..], &bucket.to_be_bytes()].concat(), []);
    b.put(
        [&[0x65, 0x01, 0x00][..], &[0x0c, 0x35, 0x4e, 0xcd], b"name"].concat(),
        b"ann",
    );
    db.write(b).unwrap();
    drop(db);
    let db = sluicedb::Db::open("/db", options()).unwrap();
    let ks = Keyspace::new(db, crate::store::Fsync::No).unwrap();
    assert_eq!(run(&ks, 0, "GET user:1"), "$2\r\nhi\r\n");
    assert_eq!(run(&ks, 0, "HGET user:2 name"), "$3\r\nann\r\n");
    assert_eq!(run(&ks, 0, "DBSIZE x"), ":2\r\n");
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    for other in 1..DATABASES {
        assert_eq!(run(&ks, other, "GET user:1"), "$-1\r\n", "db {other}");
        assert_eq!(run(&ks, other, "DBSIZE x"), ":0\r\n", "db {other}");
    }
    // What database 0 writes now is still in that layout.
    assert_eq!(run(&ks, 0, "SET user:3 x"), "+OK\r\n");
    assert_eq!(ks.db().get(data(b"user:3")).unwrap(), Some(vec![0, b'x']));
    assert_eq!(data_key(0, b"user:3"), data(b"user:3"));
    assert_eq!(data_key(9, b"user:3")[..2], [b'd', 9]);
}

/// The same names in several databases never collide: each has its own
/// values, collections, counts, key listings and expiries; `FLUSHDB`
/// empties the selected one, `FLUSHALL` all.
#[test]
fn databases_hold_their_own_keys() {
    let ks = keyspace();
    for db in [0u8, 1, 9, 15] {
        assert_eq!(run(&ks, db, &format!("SET s v{db}")), "+OK\r\n");
        assert_eq!(run(&ks, db, &format!("HSET h f {db}")), ":1\r\n");
        assert_eq!(run(&ks, db, &format!("RPUSH l{db} a b")), ":2\r\n");
    }
    for db in [0u8, 1, 9, 15] {
        let v = format!("v{db}");
        assert_eq!(run(&ks, db, "GET s"), format!("${}\r\n{v}\r\n", v.len()));
        let want = db.to_string();
        assert_eq!(
            run(&ks, db, "HGET h f"),
            format!("${}\r\n{want}\r\n", want.len())
        );
        let list = format!("l{db}");
        assert_eq!(
            run(&ks, db, "KEYS l*"),
            format!("*1\r\n${}\r\n{list}\r\n", list.len())
        );
        assert_eq!(run(&ks, db, "DBSIZE x"), ":3\r\n", "db {db}");
    }
    assert_eq!(run(&ks, 2, "DBSIZE x"), ":0\r\n");
    assert_eq!(run(&ks, 2, "RANDOMKEY x"), "$-1\r\n");
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    // The reaper deletes database 1's expired key, and only it.
    assert_eq!(run(&ks, 1, "SET gone x PX 1"), "+OK\r\n");
    assert_eq!(run(&ks, 0, "SET gone x"), "+OK\r\n");
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (reaped, _) = ks.reap(100).unwrap();
    assert_eq!(reaped, vec![(1u8, b"gone".to_vec())]);
    assert_eq!(run(&ks, 0, "DEL gone"), ":1\r\n");
    assert_eq!(run(&ks, 9, "FLUSHDB"), "+OK\r\n");
    assert_eq!(run(&ks, 9, "DBSIZE x"), ":0\r\n");
    assert_eq!(run(&ks, 9, "GET s"), "$-1\r\n");
    for db in [0u8, 1, 15] {
        assert_eq!(
            run(&ks, db, "DBSIZE x"),
            ":3\r\n",
            "db {db} after FLUSHDB of 9"
        );
        assert_eq!(
            run(&ks, db, &format!("LRANGE l{db} 0 -1")),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
    }
    // Database 9's collections became garbage, reclaimed in the background.
    while ks.reclaim(usize::MAX).unwrap() > 0 {}
    assert!(!ks.garbage_left().unwrap());
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    assert_eq!(run(&ks, 0, "FLUSHALL"), "+OK\r\n");
    for db in 0..DATABASES {
        assert_eq!(run(&ks, db, "DBSIZE x"), ":0\r\n", "db {db} after FLUSHALL");
    }
}

/// `MOVE` takes a key to another database in one batch: a collection
/// keeps its version (its elements stay where they are, nothing becomes
/// garbage), a key present there is not overwritten, an expired one is
/// (its collection becomes garbage). `COPY ... DB` copies into another
/// database.
#[test]
fn move_and_copy_reach_other_databases() {
    let ks = keyspace();
    assert_eq!(run(&ks, 0, "RPUSH l a b c"), ":3\r\n");
    assert_eq!(run(&ks, 0, "SET s v EX 100"), "+OK\r\n");
    assert_eq!(run(&ks, 0, "MOVE l 4"), ":1\r\n");
    assert_eq!(run(&ks, 0, "MOVE l 4"), ":0\r\n");
    assert_eq!(
        run(&ks, 0, "MOVE s 0"),
        "-ERR source and destination objects are the same"
    );
    assert_eq!(run(&ks, 0, "MOVE s 16"), "-ERR DB index is out of range");
    assert_eq!(
        run(&ks, 4, "LRANGE l 0 -1"),
        "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(run(&ks, 0, "EXISTS l"), ":0\r\n");
    assert!(
        !ks.garbage_left().unwrap(),
        "a moved collection is not garbage"
    );
    // Present there: not moved.
    assert_eq!(run(&ks, 4, "SET s other"), "+OK\r\n");
    assert_eq!(run(&ks, 0, "MOVE s 4"), ":0\r\n");
    assert_eq!(run(&ks, 4, "GET s"), "$5\r\nother\r\n");
    // Expired there: replaced, its collection garbage.
    assert_eq!(run(&ks, 5, "HSET s f v"), ":1\r\n");
    assert_eq!(run(&ks, 5, "PEXPIRE s 1"), ":1\r\n");
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(run(&ks, 0, "MOVE s 5"), ":1\r\n");
    assert_eq!(run(&ks, 5, "GET s"), "$1\r\nv\r\n");
    assert!(run(&ks, 5, "TTL s").starts_with(':'));
    assert!(
        ks.garbage_left().unwrap(),
        "the expired hash's version is garbage"
    );
    while ks.reclaim(usize::MAX).unwrap() > 0 {}
    // COPY into another database: a new version, the source unchanged.
    assert_eq!(run(&ks, 4, "COPY l l DB 6"), ":1\r\n");
    assert_eq!(run(&ks, 4, "COPY l l DB 6"), ":0\r\n");
    assert_eq!(run(&ks, 4, "COPY l l DB 6 REPLACE"), ":1\r\n");
    assert_eq!(run(&ks, 6, "RPUSH l d"), ":4\r\n");
    assert_eq!(run(&ks, 4, "LLEN l"), ":3\r\n");
    assert_eq!(
        run(&ks, 4, "COPY l l DB 4"),
        "-ERR source and destination objects are the same"
    );
    while ks.reclaim(usize::MAX).unwrap() > 0 {}
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
}

/// A replicated shard's entries carry no database: applied there, `MOVE`
/// and `COPY ... DB` to another database are refused (the same on every
/// node), so nothing lands where its `SELECT` cannot reach.
#[test]
fn a_replicated_entry_stays_in_database_0() {
    let ks = keyspace();
    assert_eq!(run(&ks, 0, "SET k v"), "+OK\r\n");
    for line in ["MOVE k 1", "COPY k k2 DB 3"] {
        let args: Vec<bytes::Bytes> = line.split(' ').map(bytes::Bytes::from).collect();
        let mut held = ks.lock_keys(&[b"k"]);
        let mut txn = crate::store::Txn::new(&ks);
        txn.one_db = true;
        let mut out = crate::resp::Out::default();
        let ctx = crate::data::Ctx {
            max_bulk_bytes: crate::DEFAULT_MAX_BULK_BYTES,
        };
        let name = line.split(' ').next().unwrap().to_lowercase();
        let r = crate::data::run(&name, &args, &mut txn, &ctx, &mut out);
        assert_eq!(
            r,
            Err("ERR databases other than 0 are not supported on a replicated shard".to_owned()),
            "{line}"
        );
        assert!(!txn.has_writes(), "{line}");
        txn.commit(&mut held).unwrap();
    }
    assert_eq!(run(&ks, 0, "GET k"), "$1\r\nv\r\n");
    assert_eq!(run(&ks, 1, "DBSIZE x"), ":0\r\n");
    assert_eq!(run(&ks, 3, "DBSIZE x"), ":0\r\n");
}

/// A keyspace on `fs`, every write synced.
fn open(fs: &sluicedb::fs::MemFs) -> Keyspace {
    let o = sluicedb::Options::default().fs(std::sync::Arc::new(fs.clone()));
    Keyspace::new(
        sluicedb::Db::open("/db", o).unwrap(),
        crate::store::Fsync::Always,
    )
    .unwrap()
}

/// `SWAPDB` is one engine write of the database map: crashed after any
/// file operation of it (the fault-injecting file system's image after
/// each), the database opens with both databases swapped or neither,
/// never a mix, and passes the keyspace check.
#[test]
fn a_crash_anywhere_in_a_swap_shows_either_state() {
    let fs = sluicedb::fs::MemFs::new();
    let ks = open(&fs);
    assert_eq!(run(&ks, 0, "SET a zero"), "+OK\r\n");
    assert_eq!(run(&ks, 0, "RPUSH l x y"), ":2\r\n");
    assert_eq!(run(&ks, 3, "SET a three"), "+OK\r\n");
    assert_eq!(run(&ks, 3, "HSET h f v"), ":1\r\n");
    let state = |ks: &Keyspace| {
        (0..DATABASES)
            .map(|db| run(ks, db, "GET a") + &run(ks, db, "DBSIZE x"))
            .collect::<Vec<_>>()
    };
    let before = state(&ks);
    ks.db().sync().unwrap();
    fs.capture_images(false);
    let mut held = ks.lock_all();
    ks.swap_databases(&mut held, 0, 3).unwrap();
    drop(held);
    let after = state(&ks);
    assert_ne!(before, after);
    assert_eq!(after[0], "$5\r\nthree\r\n:2\r\n");
    assert_eq!(after[3], "$4\r\nzero\r\n:2\r\n");
    let images = fs.take_images();
    assert!(!images.is_empty());
    let mut seen_after = false;
    for (op, crashed) in images {
        let reopened = open(&crashed);
        let got = state(&reopened);
        assert!(
            got == before || got == after,
            "crashed after op {op}: {got:?}"
        );
        seen_after |= got == after;
        assert_eq!(reopened.check().unwrap(), Vec::<String>::new(), "op {op}");
    }
    assert!(
        seen_after,
        "the swap is durable once it returns (appendfsync always)"
    );
    drop(ks);
    assert_eq!(state(&open(&fs)), after);
}

/// `SWAPDB` inside `EXEC` is in the transaction's one batch: crashed
/// after any file operation of its commit, the database opens with the
/// swap and the transaction's other writes, or with neither. A
/// transaction dropped before its commit puts the map back.
#[test]
fn a_swap_inside_a_transaction_commits_with_it_or_not_at_all() {
    let fs = sluicedb::fs::MemFs::new();
    let ks = open(&fs);
    assert_eq!(run(&ks, 0, "SET a zero"), "+OK\r\n");
    assert_eq!(run(&ks, 3, "SET a three"), "+OK\r\n");
    let state = |ks: &Keyspace| {
        (0..DATABASES)
            .map(|db| run(ks, db, "GET a") + &run(ks, db, "GET b"))
            .collect::<Vec<_>>()
    };
    let before = state(&ks);
    {
        let _held = ks.lock_all();
        let mut txn = crate::store::Txn::new(&ks);
        txn.swap_databases(0, 3).unwrap();
        assert_ne!(ks.swaps() % 2, 0, "reads holding no lock wait meanwhile");
        drop(txn);
    }
    assert_eq!(state(&ks), before, "dropped uncommitted: the map is back");
    assert_eq!(ks.swaps() % 2, 0);
    ks.db().sync().unwrap();
    fs.capture_images(false);
    {
        let mut held = ks.lock_all();
        let mut txn = crate::store::Txn::new(&ks);
        txn.swap_databases(0, 3).unwrap();
        txn.set(b"b", crate::store::Entry::plain(&b"after"[..]));
        txn.commit(&mut held).unwrap();
    }
    let after = state(&ks);
    assert_eq!(after[0], "$5\r\nthree\r\n$5\r\nafter\r\n");
    assert_eq!(after[3], "$4\r\nzero\r\n$-1\r\n");
    let mut seen_after = false;
    for (op, crashed) in fs.take_images() {
        let got = state(&open(&crashed));
        assert!(
            got == before || got == after,
            "crashed after op {op}: {got:?}"
        );
        seen_after |= got == after;
    }
    assert!(seen_after);
}
