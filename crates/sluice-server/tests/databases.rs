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
    // A transaction runs in the database selected; SELECT is refused
    // inside one (a transaction is one database here).
    assert_eq!(cmd(&mut c, &["SELECT", "9"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["MULTI"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["INCR", "n"]), b"+QUEUED\r\n");
    assert!(text(cmd(&mut c, &["SELECT", "0"])).starts_with("-ERR SELECT inside MULTI"));
    assert!(text(cmd(&mut c, &["EXEC"])).starts_with("-EXECABORT"));
    assert_eq!(cmd(&mut c, &["MULTI"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["INCR", "n"]), b"+QUEUED\r\n");
    assert_eq!(cmd(&mut c, &["EXEC"]), b"*1\r\n:1\r\n");
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
