//! `SELECT` through the server: each connection's database is where its
//! commands, transactions, watches, blocking pops and keyspace events
//! are; `CONFIG GET databases` and `INFO keyspace` as redis-server's.

mod common;

use std::time::{Duration, Instant};

use common::{Raw, TestServer};

fn cmd(r: &mut Raw, args: &[&str]) -> Vec<u8> {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    r.command(&a);
    r.reply()
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

#[test]
fn select_reaches_sixteen_databases() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    assert_eq!(
        cmd(&mut c, &["CONFIG", "GET", "databases"]),
        b"*2\r\n$9\r\ndatabases\r\n$2\r\n16\r\n"
    );
    assert_eq!(
        cmd(&mut c, &["SELECT", "16"]),
        b"-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        cmd(&mut c, &["SELECT", "-1"]),
        b"-ERR DB index is out of range\r\n"
    );
    assert_eq!(cmd(&mut c, &["SET", "k", "zero"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["SELECT", "9"]), b"+OK\r\n");
    let list = text(cmd(&mut c, &["CLIENT", "LIST"]));
    assert!(list.contains(" db=9 "), "{list}");
    assert_eq!(cmd(&mut c, &["GET", "k"]), b"$-1\r\n");
    assert_eq!(cmd(&mut c, &["SET", "k", "nine"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["EXPIRE", "k", "100"]), b":1\r\n");
    assert_eq!(cmd(&mut c, &["DBSIZE"]), b":1\r\n");
    let info = text(cmd(&mut c, &["INFO", "keyspace"]));
    assert!(
        info.contains("db0:keys=1,expires=0,avg_ttl=0\r\n"),
        "{info}"
    );
    assert!(
        info.contains("db9:keys=1,expires=1,avg_ttl=0\r\n"),
        "{info}"
    );
    // Another connection starts in 0; RESET goes back to 0.
    let mut other = s.raw();
    assert_eq!(cmd(&mut other, &["GET", "k"]), b"$4\r\nzero\r\n");
    let list = text(cmd(&mut other, &["CLIENT", "LIST"]));
    assert!(list.contains(" db=9 ") && list.contains(" db=0 "), "{list}");
    assert_eq!(cmd(&mut c, &["RESET"]), b"+RESET\r\n");
    assert_eq!(cmd(&mut c, &["GET", "k"]), b"$4\r\nzero\r\n");
    // A transaction runs in the database selected; a SELECT inside one
    // moves the rest of it, and the connection (more in
    // `select_inside_multi_moves_the_rest_of_the_transaction`).
    assert_eq!(cmd(&mut c, &["SELECT", "9"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["MULTI"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["INCR", "n"]), b"+QUEUED\r\n");
    assert_eq!(cmd(&mut c, &["SELECT", "0"]), b"+QUEUED\r\n");
    assert_eq!(cmd(&mut c, &["EXEC"]), b"*2\r\n:1\r\n+OK\r\n");
    assert_eq!(cmd(&mut c, &["EXISTS", "n"]), b":0\r\n");
    assert_eq!(cmd(&mut c, &["SELECT", "9"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["MULTI"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["INCR", "n"]), b"+QUEUED\r\n");
    assert_eq!(cmd(&mut c, &["EXEC"]), b"*1\r\n:2\r\n");
    assert_eq!(cmd(&mut other, &["EXISTS", "n"]), b":0\r\n");
    // FLUSHDB empties the selected database only, FLUSHALL all.
    assert_eq!(cmd(&mut c, &["FLUSHDB"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["DBSIZE"]), b":0\r\n");
    assert_eq!(cmd(&mut other, &["DBSIZE"]), b":1\r\n");
    assert_eq!(cmd(&mut c, &["FLUSHALL"]), b"+OK\r\n");
    assert_eq!(cmd(&mut other, &["DBSIZE"]), b":0\r\n");
}

/// A watch is on a key of one database: a write of the same name in
/// another does not abort the transaction, one in the same does.
#[test]
fn a_watch_is_on_the_key_of_its_database() {
    let s = TestServer::start(|_| {});
    let (mut c, mut w0, mut w3) = (s.raw(), s.raw(), s.raw());
    assert_eq!(cmd(&mut c, &["SELECT", "3"]), b"+OK\r\n");
    assert_eq!(cmd(&mut w3, &["SELECT", "3"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["WATCH", "x"]), b"+OK\r\n");
    assert_eq!(cmd(&mut w0, &["SET", "x", "1"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["MULTI"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["PING"]), b"+QUEUED\r\n");
    assert_eq!(cmd(&mut c, &["EXEC"]), b"*1\r\n+PONG\r\n");
    assert_eq!(cmd(&mut c, &["WATCH", "x"]), b"+OK\r\n");
    assert_eq!(cmd(&mut w3, &["SET", "x", "1"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["MULTI"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["PING"]), b"+QUEUED\r\n");
    assert_eq!(cmd(&mut c, &["EXEC"]), b"*-1\r\n");
}

/// A client blocked on a key of database 2 is served by a push to that
/// key in database 2, not by one to the same name in database 0.
#[test]
fn a_blocked_pop_is_served_from_its_database() {
    let s = TestServer::start(|_| {});
    let (mut waiter, mut p0, mut p2) = (s.raw(), s.raw(), s.raw());
    assert_eq!(cmd(&mut waiter, &["SELECT", "2"]), b"+OK\r\n");
    assert_eq!(cmd(&mut p2, &["SELECT", "2"]), b"+OK\r\n");
    waiter.command(&[b"BLPOP", b"q", b"0"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text(cmd(&mut p0, &["INFO", "clients"])).contains("blocked_clients:1\r") {
        assert!(Instant::now() < deadline, "the client never blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(cmd(&mut p0, &["RPUSH", "q", "in-0"]), b":1\r\n");
    assert_eq!(cmd(&mut p2, &["RPUSH", "q", "in-2"]), b":1\r\n");
    assert_eq!(waiter.reply(), b"*2\r\n$1\r\nq\r\n$4\r\nin-2\r\n");
    assert_eq!(cmd(&mut p0, &["LLEN", "q"]), b":1\r\n");
    assert_eq!(cmd(&mut p2, &["LLEN", "q"]), b":0\r\n");
}

/// Keyspace events name the database of the key.
#[test]
fn keyspace_events_name_the_database() {
    let s = TestServer::start(|_| {});
    let (mut sub, mut c) = (s.raw(), s.raw());
    assert_eq!(
        cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KE$"]),
        b"+OK\r\n"
    );
    cmd(&mut sub, &["PSUBSCRIBE", "__key*__:*"]);
    assert_eq!(cmd(&mut c, &["SELECT", "5"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["SET", "k", "v"]), b"+OK\r\n");
    assert_eq!(
        sub.reply(),
        b"*4\r\n$8\r\npmessage\r\n$10\r\n__key*__:*\r\n$16\r\n__keyspace@5__:k\r\n$3\r\nset\r\n"
    );
    assert_eq!(
        sub.reply(),
        b"*4\r\n$8\r\npmessage\r\n$10\r\n__key*__:*\r\n$18\r\n__keyevent@5__:set\r\n$1\r\nk\r\n"
    );
}

/// `SWAPDB` as redis-server answers it: the two databases trade contents
/// for every connection at once, `SWAPDB a a` is a no-op, and bad indexes
/// get redis-server's errors. The swap survives a restart.
#[test]
fn swapdb_swaps_two_databases_for_every_client_and_survives_a_restart() {
    let mut s = TestServer::start(|_| {});
    let mut c0 = s.raw();
    let mut c1 = s.raw();
    assert_eq!(cmd(&mut c1, &["SELECT", "1"]), b"+OK\r\n");
    cmd(&mut c0, &["SET", "zero", "0"]);
    cmd(&mut c0, &["RPUSH", "list0", "a", "b"]);
    cmd(&mut c0, &["SET", "exp", "x", "EX", "1000"]);
    cmd(&mut c1, &["SET", "one", "1"]);
    cmd(&mut c1, &["HSET", "hash1", "f", "v"]);
    for (args, want) in [
        (&["SWAPDB", "x", "1"][..], "-ERR invalid first DB index\r\n"),
        (&["SWAPDB", "0", "1.5"], "-ERR invalid second DB index\r\n"),
        (
            &["SWAPDB", "0", "99999999999"],
            "-ERR invalid second DB index\r\n",
        ),
        (&["SWAPDB", "0", "16"], "-ERR DB index is out of range\r\n"),
        (&["SWAPDB", "-1", "0"], "-ERR DB index is out of range\r\n"),
        (
            &["SWAPDB", "0"],
            "-ERR wrong number of arguments for 'swapdb' command\r\n",
        ),
        (&["SWAPDB", "3", "3"], "+OK\r\n"),
    ] {
        assert_eq!(text(cmd(&mut c0, args)), want, "{args:?}");
    }
    assert_eq!(cmd(&mut c0, &["SWAPDB", "0", "1"]), b"+OK\r\n");
    let seen = |c: &mut Raw| {
        (
            text(cmd(c, &["GET", "zero"])),
            text(cmd(c, &["GET", "one"])),
            text(cmd(c, &["DBSIZE"])),
        )
    };
    let in_0 = ("$-1\r\n".into(), "$1\r\n1\r\n".into(), ":2\r\n".into());
    let in_1 = ("$1\r\n0\r\n".into(), "$-1\r\n".into(), ":3\r\n".into());
    assert_eq!(seen(&mut c0), in_0);
    assert_eq!(seen(&mut c1), in_1);
    assert_eq!(
        cmd(&mut c1, &["LRANGE", "list0", "0", "-1"]),
        b"*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(cmd(&mut c0, &["HGET", "hash1", "f"]), b"$1\r\nv\r\n");
    let ttl = text(cmd(&mut c1, &["TTL", "exp"]));
    assert!(ttl.starts_with(":9") || ttl.starts_with(":1000"), "{ttl}");
    let info = text(cmd(&mut c0, &["INFO", "keyspace"]));
    assert!(info.contains("db0:keys=2,expires=0"), "{info}");
    assert!(info.contains("db1:keys=3,expires=1"), "{info}");
    // Writes after the swap land in the database as now numbered.
    cmd(&mut c0, &["SET", "after", "a"]);
    assert_eq!(cmd(&mut c0, &["MOVE", "after", "1"]), b":1\r\n");
    assert_eq!(cmd(&mut c1, &["GET", "after"]), b"$1\r\na\r\n");
    assert_eq!(cmd(&mut c1, &["DEL", "after"]), b":1\r\n");
    // Swapped back and forth with a third: a permutation.
    assert_eq!(cmd(&mut c0, &["SWAPDB", "1", "5"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c0, &["SWAPDB", "5", "0"]), b"+OK\r\n");
    assert_eq!(seen(&mut c0), in_1);
    drop((c0, c1));
    let dir = s.dir.path().to_path_buf();
    s.running.take().expect("running").shutdown().unwrap();
    s.running = Some(TestServer::start_in(&dir, |_| {}));
    let mut c = s.raw();
    assert_eq!(seen(&mut c), in_1);
    assert_eq!(cmd(&mut c, &["SELECT", "1"]), b"+OK\r\n");
    assert_eq!(text(cmd(&mut c, &["DBSIZE"])), ":0\r\n");
    assert_eq!(cmd(&mut c, &["SELECT", "5"]), b"+OK\r\n");
    assert_eq!(seen(&mut c), in_0);
    drop(c);
    s.running.take().expect("running").shutdown().unwrap();
    assert_eq!(sluice_server::check_keyspace(&dir, false), Ok(Vec::new()));
}

/// `SWAPDB` touches the watched keys of either database that exist in
/// either (redis-server's `touchAllWatchedKeysInDb`), not those in
/// neither, and serves a client blocked on a key that the swap brought.
#[test]
fn swapdb_touches_watched_keys_and_wakes_blocked_pops() {
    let s = TestServer::start(|_| {});
    let mut ctl = s.raw();
    let mut w = s.raw();
    cmd(&mut ctl, &["SELECT", "1"]);
    cmd(&mut ctl, &["RPUSH", "q", "from-1"]);
    cmd(&mut ctl, &["SET", "k", "v"]);
    // `k` is in database 1 only: a watch of it in 0 is touched.
    assert_eq!(cmd(&mut w, &["WATCH", "k"]), b"+OK\r\n");
    cmd(&mut w, &["MULTI"]);
    cmd(&mut w, &["PING"]);
    assert_eq!(cmd(&mut ctl, &["SWAPDB", "0", "1"]), b"+OK\r\n");
    assert_eq!(cmd(&mut w, &["EXEC"]), b"*-1\r\n");
    // `none` is in neither: its watch survives a swap.
    assert_eq!(cmd(&mut w, &["WATCH", "none"]), b"+OK\r\n");
    cmd(&mut w, &["MULTI"]);
    cmd(&mut w, &["PING"]);
    assert_eq!(cmd(&mut ctl, &["SWAPDB", "0", "1"]), b"+OK\r\n");
    assert_eq!(cmd(&mut w, &["EXEC"]), b"*1\r\n+PONG\r\n");
    // Now `q` is in database 1 again; a client blocks on it in 0.
    let mut b = s.raw();
    b.command(&[b"BLPOP", b"q", b"0"]);
    let want = "blocked_clients:1\r";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text(cmd(&mut ctl, &["INFO", "clients"])).contains(want) {
        assert!(Instant::now() < deadline, "never blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(cmd(&mut ctl, &["SWAPDB", "1", "0"]), b"+OK\r\n");
    assert_eq!(b.reply(), b"*2\r\n$1\r\nq\r\n$6\r\nfrom-1\r\n");
    // Inside MULTI too: the swap is in the transaction's batch, and the
    // client blocked on a key it brings is served after the EXEC.
    b.command(&[b"BLPOP", b"q2", b"0"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text(cmd(&mut ctl, &["INFO", "clients"])).contains(want) {
        assert!(Instant::now() < deadline, "never blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
    cmd(&mut ctl, &["SELECT", "1"]);
    cmd(&mut ctl, &["RPUSH", "q2", "in-1"]);
    cmd(&mut w, &["WATCH", "q2"]);
    cmd(&mut w, &["MULTI"]);
    assert_eq!(cmd(&mut w, &["SWAPDB", "0", "1"]), b"+QUEUED\r\n");
    assert_eq!(cmd(&mut w, &["LLEN", "q2"]), b"+QUEUED\r\n");
    // Its own watch, of a key the swap brings, is touched only after.
    assert_eq!(cmd(&mut w, &["EXEC"]), b"*2\r\n+OK\r\n:1\r\n");
    assert_eq!(b.reply(), b"*2\r\n$2\r\nq2\r\n$4\r\nin-1\r\n");
}

/// A key's expiry follows it through a swap: the reaper deletes it in
/// the database it is in now.
#[test]
fn an_expiring_key_expires_in_the_database_it_was_swapped_to() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    cmd(&mut c, &["SELECT", "2"]);
    cmd(&mut c, &["SET", "soon", "x", "PX", "300"]);
    cmd(&mut c, &["SET", "stays", "y"]);
    cmd(&mut c, &["SWAPDB", "2", "0"]);
    assert_eq!(cmd(&mut c, &["DBSIZE"]), b":0\r\n");
    cmd(&mut c, &["SELECT", "0"]);
    assert_eq!(cmd(&mut c, &["EXISTS", "soon"]), b":1\r\n");
    let deadline = Instant::now() + Duration::from_secs(30);
    while text(cmd(&mut c, &["INFO", "keyspace"])).contains("db0:keys=2") {
        assert!(Instant::now() < deadline, "never reaped");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cmd(&mut c, &["DBSIZE"]), b":1\r\n");
    assert_eq!(cmd(&mut c, &["GET", "stays"]), b"$1\r\ny\r\n");
}

/// `SELECT` inside `MULTI`, as redis-server runs it: queued, the commands
/// after it run in the database it selects (one transaction, one batch),
/// a bad index is that command's error alone, and the connection stays
/// in the last database selected after `EXEC`.
#[test]
fn select_inside_multi_moves_the_rest_of_the_transaction() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    cmd(&mut c, &["SET", "k", "zero"]);
    assert_eq!(cmd(&mut c, &["MULTI"]), b"+OK\r\n");
    for args in [
        &["SET", "k", "a"][..],
        &["SELECT", "1"],
        &["SET", "k", "b"],
        &["GET", "k"],
        &["SELECT", "0"],
        &["GET", "k"],
        &["SELECT", "99"],
        &["SET", "m", "x"],
        &["MOVE", "m", "3"],
        &["SELECT", "3"],
        &["GET", "m"],
        &["SELECT", "2"],
    ] {
        assert_eq!(cmd(&mut c, args), b"+QUEUED\r\n", "{args:?}");
    }
    assert_eq!(
        text(cmd(&mut c, &["EXEC"])),
        "*12\r\n+OK\r\n+OK\r\n+OK\r\n$1\r\nb\r\n+OK\r\n$1\r\na\r\n\
         -ERR DB index is out of range\r\n+OK\r\n:1\r\n+OK\r\n$1\r\nx\r\n+OK\r\n"
    );
    // The connection stays in database 2.
    assert_eq!(cmd(&mut c, &["DBSIZE"]), b":0\r\n");
    let list = text(cmd(&mut c, &["CLIENT", "LIST"]));
    assert!(list.contains(" db=2 "), "{list}");
    let mut other = s.raw();
    assert_eq!(cmd(&mut other, &["GET", "k"]), b"$1\r\na\r\n");
    assert_eq!(cmd(&mut other, &["EXISTS", "m"]), b":0\r\n");
    cmd(&mut other, &["SELECT", "1"]);
    assert_eq!(cmd(&mut other, &["GET", "k"]), b"$1\r\nb\r\n");
    cmd(&mut other, &["SELECT", "3"]);
    assert_eq!(cmd(&mut other, &["GET", "m"]), b"$1\r\nx\r\n");
}

/// A transaction over several databases: `FLUSHDB` empties only the one
/// selected (collections staged in another keep their elements), a
/// client blocked in another database is served by a push there, and
/// the keyspace check passes afterwards.
#[test]
fn a_transaction_over_several_databases_flushes_and_serves_each_its_own() {
    let mut s = TestServer::start(|_| {});
    let mut c = s.raw();
    let mut b = s.raw();
    cmd(&mut b, &["SELECT", "6"]);
    b.command(&[b"BLPOP", b"q", b"0"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text(cmd(&mut c, &["INFO", "clients"])).contains("blocked_clients:1\r") {
        assert!(Instant::now() < deadline, "never blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
    cmd(&mut c, &["SELECT", "5"]);
    cmd(&mut c, &["HSET", "old5", "f", "v"]);
    cmd(&mut c, &["MULTI"]);
    for args in [
        &["SELECT", "4"][..],
        &["HSET", "h", "f", "v"],
        &["SELECT", "5"],
        &["HSET", "h2", "f", "v"],
        &["FLUSHDB"],
        &["SADD", "after", "m"],
        &["SELECT", "6"],
        &["RPUSH", "q", "x"],
        &["SELECT", "4"],
        &["HGET", "h", "f"],
    ] {
        assert_eq!(cmd(&mut c, args), b"+QUEUED\r\n", "{args:?}");
    }
    assert_eq!(
        text(cmd(&mut c, &["EXEC"])),
        "*10\r\n+OK\r\n:1\r\n+OK\r\n:1\r\n+OK\r\n:1\r\n+OK\r\n:1\r\n+OK\r\n$1\r\nv\r\n"
    );
    assert_eq!(b.reply(), b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n");
    assert_eq!(cmd(&mut c, &["HGET", "h", "f"]), b"$1\r\nv\r\n");
    cmd(&mut c, &["SELECT", "5"]);
    assert_eq!(text(cmd(&mut c, &["KEYS", "*"])), "*1\r\n$5\r\nafter\r\n");
    drop((b, c));
    let dir = s.dir.path().to_path_buf();
    s.running.take().expect("running").shutdown().unwrap();
    assert_eq!(sluice_server::check_keyspace(&dir, true), Ok(Vec::new()));
}

/// `SWAPDB` while other clients write and read both databases: no write
/// is lost or lands in both (the swap waits for the writes that hold
/// their keys' locks, and writes after it go where the map now says),
/// every read sees one database whole (a read holding no lock runs again
/// if a swap happened meanwhile), and the keyspace check passes.
#[test]
fn swaps_under_concurrent_writes_lose_nothing() {
    let mut s = TestServer::start(|_| {});
    let addr = s.addr();
    let rounds = 400;
    let writers: Vec<_> = [0u8, 1]
        .into_iter()
        .map(|db| {
            std::thread::spawn(move || {
                let mut c = Raw::connect(addr);
                cmd(&mut c, &["SELECT", &db.to_string()]);
                for _ in 0..rounds {
                    assert_eq!(text(cmd(&mut c, &["INCR", "n"])).as_bytes()[0], b':');
                    cmd(&mut c, &["SADD", "s", &format!("{db}")]);
                }
            })
        })
        .collect();
    let reader = std::thread::spawn(move || {
        let mut c = Raw::connect(addr);
        for _ in 0..rounds {
            // Each database holds `n` and `s`, and nothing else, once
            // both writers started: never a mix of the two.
            let size = text(cmd(&mut c, &["DBSIZE"]));
            assert!(
                [":0\r\n", ":1\r\n", ":2\r\n"].contains(&size.as_str()),
                "{size}"
            );
        }
    });
    let mut c = s.raw();
    let mut swaps = 0;
    while !writers.iter().all(|w| w.is_finished()) {
        assert_eq!(cmd(&mut c, &["SWAPDB", "0", "1"]), b"+OK\r\n");
        swaps += 1;
    }
    for w in writers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    let n = |c: &mut Raw| -> i64 {
        let r = text(cmd(c, &["GET", "n"]));
        r.lines().nth(1).map_or(0, |v| v.parse().unwrap())
    };
    let total = n(&mut c) + {
        cmd(&mut c, &["SELECT", "1"]);
        n(&mut c)
    };
    assert!(swaps > 0);
    assert_eq!(total, 2 * rounds, "after {swaps} swaps");
    for db in ["1", "0"] {
        cmd(&mut c, &["SELECT", db]);
        let card = text(cmd(&mut c, &["SCARD", "s"]));
        assert!(card == ":1\r\n" || card == ":2\r\n", "{card}");
    }
    drop(c);
    let dir = s.dir.path().to_path_buf();
    s.running.take().expect("running").shutdown().unwrap();
    assert_eq!(sluice_server::check_keyspace(&dir, true), Ok(Vec::new()));
}
