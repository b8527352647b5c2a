//! `FLUSHDB` and `FLUSHALL` map database numbers to fresh stored
//! databases in one batch (`docs/design.md`, "Databases"): crashed after
//! any file operation, alone or inside `EXEC`, a database shows every
//! write or none of it; what a flush left behind is reclaimed in the
//! background, again after a restart; and the nodes of a replicated shard
//! choose the same fresh stored database whatever each reclaimed.
//!
//! Randomized tests print their seed; `SLUICE_FLUSH_SEED` replays one.

use std::sync::Arc;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use sluicedb::fs::MemFs;
use sluicedb::{Db, Options};

use crate::data::Ctx;
use crate::resp::Out;
use crate::store::{Fsync, Keyspace, Txn, DATABASES, DB_MAP_KEY};
use crate::testutil::command_in;

/// More keys than one batch of the deletes `FLUSHDB` wrote before it
/// mapped numbers (10,000), so that a flush by deletes crosses batches.
const MANY_KEYS: usize = 12_000;

fn seed() -> u64 {
    let seed = std::env::var("SLUICE_FLUSH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("seed {seed} (SLUICE_FLUSH_SEED replays it)");
    seed
}

/// A keyspace on `fs`, every write synced (`appendfsync always`).
fn open(fs: &MemFs) -> Keyspace {
    let o = Options::default().fs(Arc::new(fs.clone()));
    Keyspace::new(Db::open("/db", o).unwrap(), Fsync::Always).unwrap()
}

fn run(ks: &Keyspace, db: u8, line: &str) -> String {
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    match command_in(ks, db, &args) {
        Ok(r) => String::from_utf8_lossy(&r).into_owned(),
        Err(e) => format!("-{e}"),
    }
}

/// `n` strings `k0..` (every tenth with a TTL) and four collections of
/// `width` elements in database `db`.
fn fill(ks: &Keyspace, db: u8, n: usize, width: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut line = "MSET".to_owned();
        for i in chunk {
            line += &format!(" k{i} v{i}");
        }
        assert_eq!(run(ks, db, &line), "+OK\r\n");
    }
    for i in (0..n).step_by(10) {
        assert_eq!(run(ks, db, &format!("EXPIRE k{i} 100000")), ":1\r\n");
    }
    let items = |f: &dyn Fn(usize) -> String| (0..width).map(f).collect::<Vec<_>>().join(" ");
    for line in [
        format!("HSET h {}", items(&|i| format!("f{i} v{i}"))),
        format!("RPUSH l {}", items(&|i| format!("e{i}"))),
        format!("ZADD z {}", items(&|i| format!("{i} m{i}"))),
        format!("SADD s {}", items(&|i| format!("m{i}"))),
        format!("HSET mv {}", items(&|i| format!("f{i} v{i}"))),
    ] {
        assert_eq!(run(ks, db, &line), format!(":{width}\r\n"));
    }
    assert_eq!(run(ks, db, "EXPIRE z 100000"), ":1\r\n");
}

/// What a client of databases `dbs` sees (key counts, some values, the
/// collections' sizes).
fn state(ks: &Keyspace, dbs: &[u8]) -> Vec<String> {
    let mut s = Vec::new();
    for &db in dbs {
        for line in [
            "DBSIZE x",
            "GET k0",
            "GET k7",
            "EXISTS k10",
            "HLEN h",
            "LRANGE l 0 1",
            "ZCARD z",
            "SCARD s",
            "HLEN mv",
            "HGET mv f1",
            "GET a",
            "GET b",
            "LRANGE nl 0 -1",
        ] {
            s.push(format!("db {db} {line}: {}", run(ks, db, line)));
        }
    }
    s
}

/// Reclaims everything a flush left behind, each round synced so that a
/// crash image can land between rounds.
fn reclaim_synced(ks: &Keyspace) {
    let mut rounds = 0;
    while ks.reclaim(1_000).unwrap() > 0 {
        ks.db().sync().unwrap();
        rounds += 1;
        assert!(rounds < 1_000, "reclaiming never ends");
    }
    assert!(!ks.garbage_left().unwrap());
}

/// Every crash image shows `before` or `after`, passes the keyspace
/// check, and after reclaiming what the flush left behind still shows the
/// same and passes it again. Returns how many showed `after`.
fn check_images(
    images: Vec<(u64, MemFs)>,
    dbs: &[u8],
    before: &[String],
    after: &[String],
) -> usize {
    assert!(!images.is_empty());
    let total = images.len();
    let mut seen_after = 0;
    for (op, crashed) in images {
        let ks = open(&crashed);
        let got = state(&ks, dbs);
        assert!(
            got == before || got == after,
            "crashed after op {op}: neither state:\n{}",
            got.iter()
                .zip(after)
                .zip(before)
                .filter(|((g, a), b)| g != a || g != b)
                .map(|((g, a), b)| format!("  got {g:?}\n    after {a:?}\n    before {b:?}\n"))
                .collect::<String>()
        );
        seen_after += usize::from(got == after);
        assert_eq!(ks.check().unwrap(), Vec::<String>::new(), "op {op}");
        while ks.reclaim(usize::MAX).unwrap() > 0 {}
        assert!(!ks.garbage_left().unwrap(), "op {op}");
        assert_eq!(
            state(&ks, dbs),
            got,
            "op {op}: reclaiming changed what is seen"
        );
        assert_eq!(ks.check().unwrap(), Vec::<String>::new(), "op {op}");
    }
    println!("{total} crash images, {seen_after} after");
    seen_after
}

/// `FLUSHDB` of a database of more keys than a batch of deletes, with
/// collections and TTLs, crashed after any file operation of it and of
/// the reclaiming after it: the database is whole or empty, the other
/// untouched, and the keyspace consistent. (Flushed by deletes in
/// batches, the images between the batches showed part of the keys.)
#[test]
fn a_crash_anywhere_in_a_flushdb_shows_all_or_nothing() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed());
    let flushed: u8 = if rng.gen_bool(0.5) {
        0
    } else {
        rng.gen_range(1..DATABASES)
    };
    let other = (flushed + rng.gen_range(1..DATABASES)) % DATABASES;
    let n = MANY_KEYS + rng.gen_range(0..2_000);
    println!("FLUSHDB of database {flushed} holding {n} strings; database {other} kept");
    let fs = MemFs::new();
    let ks = open(&fs);
    fill(&ks, flushed, n, rng.gen_range(100..400));
    fill(&ks, other, 50, 20);
    let dbs = [flushed, other];
    let before = state(&ks, &dbs);
    ks.db().sync().unwrap();
    fs.capture_images(false);
    assert_eq!(run(&ks, flushed, "FLUSHDB"), "+OK\r\n");
    let after = state(&ks, &dbs);
    assert_eq!(after[0], format!("db {flushed} DBSIZE x: :0\r\n"));
    assert_ne!(after, before);
    assert_eq!(after[13..], before[13..], "the other database is untouched");
    reclaim_synced(&ks);
    assert_eq!(state(&ks, &dbs), after);
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    let images = fs.take_images();
    let seen_after = check_images(images, &dbs, &before, &after);
    assert!(seen_after > 0, "the flush is durable once it returns");
}

/// Runs `lines` as one `EXEC` in database `db` (a `SELECT n` line
/// switches database, as queued inside `MULTI`), and commits.
fn exec(ks: &Keyspace, db: u8, lines: &[String]) -> Vec<String> {
    let mut held = ks.lock_all();
    let mut txn = Txn::new(ks);
    txn.db = db;
    txn.in_multi = true;
    let ctx = Ctx {
        max_bulk_bytes: crate::DEFAULT_MAX_BULK_BYTES,
    };
    let mut replies = Vec::new();
    for line in lines {
        if let Some(n) = line.strip_prefix("SELECT ") {
            txn.select(n.parse().unwrap());
            replies.push("+OK\r\n".to_owned());
            continue;
        }
        let args: Vec<Bytes> = line
            .split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        let name = line.split(' ').next().unwrap().to_lowercase();
        let mut out = Out::default();
        crate::data::run(&name, &args, &mut txn, &ctx, &mut out).unwrap();
        replies.push(String::from_utf8_lossy(&out.buf).into_owned());
    }
    txn.commit(&mut held).unwrap();
    replies
}

/// `FLUSHDB` (or `FLUSHALL`) inside `EXEC` with other writes before and
/// after it, in its database and another (a hash `MOVE`d out before the
/// flush among them):
/// crashed after any file operation of the commit and of the reclaiming,
/// the keyspace shows the whole transaction or none of it, and the moved
/// hash keeps its fields once everything left behind is reclaimed. (With
/// the deletes in batches ahead of the transaction's own, an image showed
/// the flush without the other writes; and the moved hash's version
/// became garbage with the flushed database, losing its fields.)
#[test]
fn a_flushdb_inside_exec_commits_with_the_transaction_or_not_at_all() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed());
    let flushed: u8 = rng.gen_range(0..DATABASES);
    let other = (flushed + rng.gen_range(1..DATABASES)) % DATABASES;
    let n = MANY_KEYS + rng.gen_range(0..2_000);
    let fs = MemFs::new();
    let ks = open(&fs);
    let width = rng.gen_range(100..300);
    fill(&ks, flushed, n, width);
    fill(&ks, other, 30, 10);
    assert_eq!(run(&ks, other, "DEL mv"), ":1\r\n");
    let dbs = [flushed, other];
    let before = state(&ks, &dbs);
    // Before the flush, in some order: writes to keys the flush empties,
    // and the move of `mv` to the other database.
    let mut ahead = vec![
        "SET a lost".to_owned(),
        "HSET h f0 changed".to_owned(),
        "DEL l".to_owned(),
        "SET k7 lost".to_owned(),
        format!("MOVE mv {other}"),
    ];
    for i in (1..ahead.len()).rev() {
        ahead.swap(i, rng.gen_range(0..=i));
    }
    ahead.truncate(rng.gen_range(1..=ahead.len()));
    if !ahead.iter().any(|l| l.starts_with("MOVE")) {
        ahead.push(format!("MOVE mv {other}"));
    }
    let mut lines = ahead;
    let all = rng.gen_bool(0.3);
    lines.push(if all { "FLUSHALL" } else { "FLUSHDB" }.to_owned());
    lines.extend(["SET b kept".to_owned(), "RPUSH nl x y".to_owned()]);
    let there = rng.gen_bool(0.5);
    if there {
        lines.extend([format!("SELECT {other}"), "SET a there".to_owned()]);
    }
    println!("database {flushed} ({n} strings), other {other}: EXEC {lines:?}");
    ks.db().sync().unwrap();
    fs.capture_images(false);
    exec(&ks, flushed, &lines);
    let after = state(&ks, &dbs);
    assert_eq!(after[0], format!("db {flushed} DBSIZE x: :2\r\n"));
    if all {
        let n = usize::from(there);
        assert_eq!(after[13], format!("db {other} DBSIZE x: :{n}\r\n"));
    } else {
        assert_eq!(after[13 + 8], format!("db {other} HLEN mv: :{width}\r\n"));
    }
    reclaim_synced(&ks);
    assert_eq!(state(&ks, &dbs), after, "reclaiming changed what is seen");
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    let seen_after = check_images(fs.take_images(), &dbs, &before, &after);
    assert!(seen_after > 0, "the transaction is durable once committed");
}

/// A flush's stored database left behind is found again at open and
/// reclaimed in the background: its data keys, its time index entries
/// and its collections' elements all go, while `DBSIZE` counts only the
/// fresh database's keys and the reaper passes its due entries over.
#[test]
fn what_a_flush_left_behind_is_reclaimed_after_a_restart() {
    let fs = MemFs::new();
    let ks = open(&fs);
    fill(&ks, 4, 3_000, 200);
    fill(&ks, 0, 40, 10);
    assert_eq!(run(&ks, 4, "SET gone x PX 1"), "+OK\r\n");
    let old = ks.stored_db(4);
    assert_eq!(run(&ks, 4, "FLUSHDB"), "+OK\r\n");
    let fresh = ks.stored_db(4);
    assert_ne!(old, fresh);
    assert!(
        fresh >= DATABASES,
        "a stored database no number named before"
    );
    assert_eq!(run(&ks, 4, "SET new y"), "+OK\r\n");
    drop(ks);

    let ks = open(&fs);
    assert_eq!(ks.stored_db(4), fresh);
    assert!(ks.garbage_left().unwrap(), "found again at open");
    assert_eq!(run(&ks, 4, "DBSIZE x"), ":1\r\n");
    assert_eq!(run(&ks, 4, "GET new"), "$1\r\ny\r\n");
    assert_eq!(run(&ks, 0, "DBSIZE x"), ":45\r\n");
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (reaped, _) = ks.reap(100).unwrap();
    assert!(
        reaped.is_empty(),
        "no key of database 4 expired: {reaped:?}"
    );
    let mut rounds = 0;
    while ks.reclaim(1_000).unwrap() > 0 {
        rounds += 1;
        assert_eq!(run(&ks, 4, "DBSIZE x"), ":1\r\n", "meanwhile");
    }
    assert!(rounds > 3, "in rounds: {rounds}");
    assert!(!ks.garbage_left().unwrap());
    let db = ks.db();
    let left = db
        .range(crate::store::data_prefix(old)..crate::store::data_end(old))
        .count();
    assert_eq!(left, 0, "data keys of the old stored database");
    let index_left = db
        .range(vec![b'y']..vec![b'z'])
        .filter(|p| p.as_ref().unwrap().0.get(9) == Some(&old))
        .count();
    assert_eq!(
        index_left, 0,
        "time index entries of the old stored database"
    );
    // Database 0's collections' elements alone: 10 fields, 10 list
    // elements, 10 members (2 keys each in a sorted set), 10 set members
    // and 10 fields of `mv`.
    assert_eq!(db.range(vec![b'e']..vec![b'f']).count(), 60);
    assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    assert_eq!(run(&ks, 4, "DBSIZE x"), ":1\r\n");
}

fn node() -> crate::server::Server {
    let o = Options::default().fs(Arc::new(MemFs::new()));
    let ks = Keyspace::new(Db::open("/db", o).unwrap(), Fsync::No).unwrap();
    crate::server::Server::new(ks, crate::Config::new("/unused"))
}

/// Applies one replicated entry of one request to `server`.
fn apply(server: &crate::server::Server, index: u64, lines: &[String]) -> Vec<u8> {
    let req = crate::raft::Request {
        now_ms: crate::store::now_ms(),
        resp3: false,
        multi: lines.len() > 1,
        cmds: lines
            .iter()
            .map(|l| {
                l.split(' ')
                    .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                    .collect()
            })
            .collect(),
    };
    let mark = (b"ra".to_vec(), index.to_le_bytes().to_vec());
    let mut replies = crate::cmd::apply_entry(server, vec![req], mark, index).unwrap();
    replies.pop().unwrap()
}

/// The nodes of a replicated shard apply the same entries; each reclaims
/// what flushes left behind on its own schedule. The fresh stored
/// database a flush maps a number to comes from the map alone, so one
/// node that reclaims after every entry and one that never does choose
/// the same, write the same map, and answer the same, also once the
/// flushes went round all 256 stored databases (the node that never
/// reclaims then deletes what the chosen one still holds first).
#[test]
fn replicas_choose_the_same_fresh_stored_database() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed());
    let (eager, lazy) = (node(), node());
    let mut handed_out = std::collections::BTreeSet::new();
    for index in 1..=600u64 {
        let i = index;
        let lines: Vec<String> = match rng.gen_range(0..100) {
            0..=9 => vec!["FLUSHALL".into()],
            10..=29 => vec!["FLUSHDB".into()],
            30..=39 => vec![
                format!("SET m{i} v"),
                "FLUSHDB".into(),
                format!("HSET hm f{i} v"),
            ],
            40..=59 => vec![format!("HSET h{} f{i} v", i % 7)],
            60..=69 => vec![format!("RPUSH l{} a b c", i % 3)],
            _ => vec![format!("SET k{} v{i} EX 1000", i % 50)],
        };
        let (a, b) = (apply(&eager, index, &lines), apply(&lazy, index, &lines));
        assert_eq!(a, b, "entry {index}: {lines:?}");
        let map = |s: &crate::server::Server| s.ks.db().get(DB_MAP_KEY).unwrap();
        assert_eq!(map(&eager), map(&lazy), "entry {index}: {lines:?}");
        if let Some(m) = map(&eager) {
            handed_out.extend(m);
        }
        while eager.ks.reclaim(usize::MAX).unwrap() > 0 {}
        if index % 50 == 0 {
            let dbsize = |s: &crate::server::Server| run(&s.ks, 0, "DBSIZE x");
            assert_eq!(dbsize(&eager), dbsize(&lazy), "entry {index}");
            assert_eq!(eager.ks.check().unwrap(), Vec::<String>::new());
            assert_eq!(lazy.ks.check().unwrap(), Vec::<String>::new());
        }
    }
    assert!(
        handed_out.len() > 200,
        "went round the stored databases: {}",
        handed_out.len()
    );
    while lazy.ks.reclaim(usize::MAX).unwrap() > 0 {}
    assert!(!lazy.ks.garbage_left().unwrap());
    assert_eq!(lazy.ks.check().unwrap(), Vec::<String>::new());
    for key in ["h0", "h3", "l1", "hm"] {
        let line = format!("HLEN {key}");
        assert_eq!(run(&eager.ks, 0, &line), run(&lazy.ks, 0, &line));
    }
}

/// The bytes of the format document's example: `SWAPDB 0 9`, then
/// `FLUSHDB` in database 0, then `FLUSHALL`.
#[test]
fn the_database_map_after_flushes_encodes_as_documented() {
    let fs = MemFs::new();
    let ks = open(&fs);
    let map = |ks: &Keyspace| ks.db().get(DB_MAP_KEY).unwrap().unwrap();
    let mut held = ks.lock_all();
    ks.swap_databases(&mut held, 0, 9).unwrap();
    drop(held);
    assert_eq!(
        map(&ks),
        [9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12, 13, 14, 15]
    );
    assert_eq!(run(&ks, 0, "SET a b"), "+OK\r\n");
    assert_eq!(run(&ks, 0, "FLUSHDB"), "+OK\r\n");
    let want = [
        0x10, 1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12, 13, 14, 15, 0x10,
    ];
    assert_eq!(map(&ks), want);
    assert_eq!(run(&ks, 0, "FLUSHALL"), "+OK\r\n");
    let mut want: Vec<u8> = (0x11..=0x20).collect();
    want.push(0x20);
    assert_eq!(map(&ks), want);
    drop(ks);
    let ks = open(&fs);
    assert_eq!(ks.stored_db(15), 0x20);
    assert!(ks.garbage_left().unwrap(), "stored database 9 holds `a`");
    while ks.reclaim(usize::MAX).unwrap() > 0 {}
    assert!(!ks.garbage_left().unwrap());
}

/// A flush touches the watched keys that exist in what it empties, and no
/// other (redis-server's rule: `DEL x; WATCH x; FLUSHALL` lets the `EXEC`
/// run), alone and inside `EXEC`.
#[test]
fn a_flush_touches_the_watched_keys_it_empties_and_no_other() {
    let ks = crate::testutil::keyspace();
    assert_eq!(run(&ks, 2, "SET x 1"), "+OK\r\n");
    assert_eq!(run(&ks, 3, "HSET y f v"), ":1\r\n");
    let (x, gone, y) = (ks.watch(2, b"x"), ks.watch(2, b"gone"), ks.watch(3, b"y"));
    let version = |db: u8, key: &[u8]| {
        let held = ks.lock_all();
        ks.watched_version(&held, db, key)
    };
    assert_eq!(run(&ks, 2, "FLUSHDB"), "+OK\r\n");
    assert_ne!(version(2, b"x"), Some(x), "x existed: touched");
    assert_eq!(
        version(2, b"gone"),
        Some(gone),
        "never existed: not touched"
    );
    assert_eq!(version(3, b"y"), Some(y), "another database: not touched");
    let x = version(2, b"x").unwrap();
    exec(&ks, 0, &["SET z 1".into(), "FLUSHALL".into()]);
    assert_ne!(version(3, b"y"), Some(y), "y existed: touched");
    assert_eq!(
        version(2, b"x"),
        Some(x),
        "flushed before: not touched again"
    );
    assert_eq!(version(2, b"gone"), Some(gone));
}

/// A flush inside a transaction changes the map in memory at once, with
/// the change counter odd (reads holding no lock wait) until the commit;
/// dropped uncommitted, the transaction puts the map back, and the next
/// flush hands out the same stored database.
#[test]
fn a_flush_dropped_uncommitted_puts_the_map_back() {
    let ks = crate::testutil::keyspace();
    assert_eq!(run(&ks, 5, "SET a 1"), "+OK\r\n");
    let stored = ks.stored_db(5);
    let fresh = {
        let _held = ks.lock_all();
        let mut txn = Txn::new(&ks);
        txn.db = 5;
        txn.flush(false).unwrap();
        assert_ne!(ks.swaps() % 2, 0, "reads holding no lock wait meanwhile");
        assert_ne!(ks.stored_db(5), stored);
        ks.stored_db(5)
    };
    assert_eq!(ks.swaps() % 2, 0);
    assert_eq!(ks.stored_db(5), stored);
    assert_eq!(run(&ks, 5, "GET a"), "$1\r\n1\r\n");
    assert!(!ks.garbage_left().unwrap());
    assert_eq!(run(&ks, 5, "FLUSHDB"), "+OK\r\n");
    assert_eq!(ks.stored_db(5), fresh);
    assert_eq!(run(&ks, 5, "GET a"), "$-1\r\n");
    assert!(
        ks.garbage_left().unwrap(),
        "the old stored database holds `a`"
    );
}
