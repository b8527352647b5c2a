//! The collection types on a running server: blocking pops (served first
//! blocked, first served; timeouts; disconnection), deleting a large
//! collection, and the keyspace check after mixed workloads.

mod common;

use std::time::{Duration, Instant};

use common::{Raw, TestServer};

fn cmd(r: &mut Raw, args: &[&str]) -> Vec<u8> {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    r.command(&a);
    r.reply()
}

/// Waits until `INFO` reports `n` blocked clients (the order in which
/// clients block is what the tests control, not how long anything takes).
fn wait_blocked(r: &mut Raw, n: usize) {
    let want = format!("blocked_clients:{n}\r");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = cmd(r, &["INFO", "clients"]);
        if String::from_utf8_lossy(&info).contains(&want) {
            return;
        }
        assert!(Instant::now() < deadline, "never saw {n} blocked clients");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn blocked_clients_are_served_first_blocked_first_served() {
    let s = TestServer::start(|_| {});
    let mut ctl = s.raw();
    let mut a = s.raw();
    let mut b = s.raw();
    a.command(&[b"BLPOP", b"q", b"0"]);
    wait_blocked(&mut ctl, 1);
    b.command(&[b"BLPOP", b"other", b"q", b"0"]);
    wait_blocked(&mut ctl, 2);
    // One push of two elements serves both, in the order they blocked.
    assert_eq!(cmd(&mut ctl, &["LPUSH", "q", "x", "y"]), b":2\r\n");
    assert_eq!(a.reply(), b"*2\r\n$1\r\nq\r\n$1\r\ny\r\n");
    assert_eq!(b.reply(), b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n");
    assert_eq!(cmd(&mut ctl, &["EXISTS", "q"]), b":0\r\n");
    wait_blocked(&mut ctl, 0);
}

#[test]
fn blmove_serves_a_client_blocked_on_its_destination() {
    let s = TestServer::start(|_| {});
    let mut ctl = s.raw();
    let mut mover = s.raw();
    let mut popper = s.raw();
    mover.command(&[b"BLMOVE", b"src", b"dst", b"LEFT", b"RIGHT", b"0"]);
    wait_blocked(&mut ctl, 1);
    popper.command(&[b"BRPOP", b"dst", b"0"]);
    wait_blocked(&mut ctl, 2);
    assert_eq!(cmd(&mut ctl, &["RPUSH", "src", "v"]), b":1\r\n");
    assert_eq!(mover.reply(), b"$1\r\nv\r\n");
    assert_eq!(popper.reply(), b"*2\r\n$3\r\ndst\r\n$1\r\nv\r\n");
    assert_eq!(cmd(&mut ctl, &["DBSIZE"]), b":0\r\n");
}

#[test]
fn a_timeout_replies_nil_and_a_gone_client_takes_nothing() {
    let s = TestServer::start(|_| {});
    let mut ctl = s.raw();
    let mut a = s.raw();
    a.command(&[b"BRPOP", b"q", b"0.05"]);
    assert_eq!(a.reply(), b"*-1\r\n");
    // Commands sent while blocked run after the pop.
    a.send(b"*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n");
    wait_blocked(&mut ctl, 1);
    assert_eq!(cmd(&mut ctl, &["RPUSH", "q", "1"]), b":1\r\n");
    assert_eq!(a.reply(), b"*2\r\n$1\r\nq\r\n$1\r\n1\r\n");
    assert_eq!(a.reply(), b"+PONG\r\n");
    let mut gone = s.raw();
    gone.command(&[b"BLPOP", b"q", b"0"]);
    wait_blocked(&mut ctl, 1);
    drop(gone);
    wait_blocked(&mut ctl, 0);
    assert_eq!(cmd(&mut ctl, &["RPUSH", "q", "2"]), b":1\r\n");
    assert_eq!(
        cmd(&mut ctl, &["LRANGE", "q", "0", "-1"]),
        b"*1\r\n$1\r\n2\r\n"
    );
}

#[test]
fn deleting_a_large_collection_leaves_a_consistent_keyspace() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    for i in 0..20 {
        let mut args = vec!["HSET".to_owned(), "big".to_owned()];
        for j in 0..100 {
            args.push(format!("f{i}-{j}"));
            args.push("v".to_owned());
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(cmd(&mut c, &a), b":100\r\n");
    }
    assert_eq!(cmd(&mut c, &["HLEN", "big"]), b":2000\r\n");
    // Every type, then deleted, overwritten, renamed and expired.
    cmd(&mut c, &["RPUSH", "l", "a", "b", "c"]);
    cmd(&mut c, &["SADD", "s", "a", "b"]);
    cmd(&mut c, &["HSET", "h", "a", "1"]);
    assert_eq!(cmd(&mut c, &["DEL", "big"]), b":1\r\n");
    assert_eq!(cmd(&mut c, &["SET", "s", "now a string"]), b"+OK\r\n");
    assert_eq!(cmd(&mut c, &["RENAME", "l", "l2"]), b"+OK\r\n");
    assert_eq!(
        cmd(&mut c, &["LRANGE", "l2", "0", "-1"]),
        b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(cmd(&mut c, &["PEXPIRE", "h", "1"]), b":1\r\n");
    cmd(&mut c, &["MULTI"]);
    cmd(&mut c, &["HSET", "t", "a", "1"]);
    cmd(&mut c, &["DEL", "t"]);
    cmd(&mut c, &["EXEC"]);
    assert_eq!(cmd(&mut c, &["HLEN", "big"]), b":0\r\n");
    drop(c);
    let dir = s.dir.path().to_path_buf();
    let mut s = s;
    s.running
        .take()
        .expect("running")
        .shutdown()
        .expect("shutdown");
    let problems = sluice_server::check_keyspace(&dir, true).expect("check");
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A pipeline's commands are each counted and timed in `INFO commandstats`
/// (a batch reads the clocks once, then once per command), the pipelined
/// writes run as one batch included, and the stats seen by a command of
/// the same pipeline include those before it.
#[test]
fn pipelined_commands_are_each_counted_and_timed() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    let mut batch = Vec::new();
    for i in 0..8 {
        batch.extend(common::encode(&[b"SET", format!("k{i}").as_bytes(), b"v"]));
    }
    for i in 0..8 {
        batch.extend(common::encode(&[b"GET", format!("k{i}").as_bytes()]));
    }
    batch.extend(common::encode(&[b"NOSUCH"]));
    batch.extend(common::encode(&[b"INFO", b"commandstats"]));
    c.send(&batch);
    for _ in 0..8 {
        assert_eq!(c.reply(), b"+OK\r\n");
    }
    for _ in 0..8 {
        assert_eq!(c.reply(), b"$1\r\nv\r\n");
    }
    assert!(c.reply().starts_with(b"-ERR unknown command"));
    let stats = String::from_utf8_lossy(&c.reply()).into_owned();
    for name in ["set", "get"] {
        let line = stats
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| panic!("no cmdstat_{name}: {stats}"));
        assert!(line.contains(":calls=8,usec="), "{line}");
        assert!(line.contains("failed_calls=0"), "{line}");
    }
}

#[test]
fn info_client_list_and_client_kill_say_what_redis_says() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    let info = String::from_utf8_lossy(&cmd(&mut c, &["INFO"])).into_owned();
    for field in [
        "# CPU\r\nused_cpu_sys:",
        "used_cpu_user:",
        "master_repl_offset:0",
    ] {
        assert!(info.contains(field), "INFO lacks {field:?}");
    }
    cmd(&mut c, &["GET"]);
    cmd(&mut c, &["HSET", "h", "a", "1"]);
    cmd(&mut c, &["GET", "h"]);
    let stats = String::from_utf8_lossy(&cmd(&mut c, &["INFO", "commandstats"])).into_owned();
    assert!(
        stats.contains("cmdstat_get:calls=2,") && stats.contains("rejected_calls=0,failed_calls=2"),
        "{stats}"
    );
    let list = String::from_utf8_lossy(&cmd(&mut c, &["CLIENT", "LIST"])).into_owned();
    assert!(list.contains("cmd=client|list"), "{list}");
    let mut victim = s.raw();
    let id = String::from_utf8_lossy(&cmd(&mut victim, &["CLIENT", "ID"]))
        .trim_start_matches(':')
        .trim()
        .to_owned();
    assert_eq!(cmd(&mut c, &["CLIENT", "KILL", "ID", &id]), b":1\r\n");
    assert!(
        victim.read_to_close().is_empty(),
        "a killed client is closed"
    );
    assert_eq!(cmd(&mut c, &["CLIENT", "KILL", "ID", &id]), b":0\r\n");
}

#[test]
fn published_messages_reach_channel_and_pattern_subscribers() {
    let s = TestServer::start(|_| {});
    let mut sub = s.raw();
    let mut sub3 = s.raw();
    let mut publisher = s.raw();
    assert_eq!(
        cmd(&mut sub, &["SUBSCRIBE", "news"]),
        b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    );
    assert_eq!(
        cmd(&mut sub, &["PSUBSCRIBE", "n*"]),
        b"*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:2\r\n"
    );
    cmd(&mut sub3, &["HELLO", "3"]);
    assert_eq!(
        cmd(&mut sub3, &["SUBSCRIBE", "news"]),
        b">3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
    );
    assert_eq!(cmd(&mut publisher, &["PUBLISH", "news", "hi"]), b":3\r\n");
    assert_eq!(
        sub.reply(),
        b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
    );
    assert_eq!(
        sub.reply(),
        b"*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
    );
    assert_eq!(
        sub3.reply(),
        b">3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
    );
    // A RESP3 subscriber may run any command.
    assert_eq!(cmd(&mut sub3, &["GET", "nokey"]), b"_\r\n");
    drop(sub);
    // The subscriptions of a closed connection go with it (it closes
    // asynchronously: ask until it has).
    let deadline = Instant::now() + Duration::from_secs(30);
    while cmd(&mut publisher, &["PUBLISH", "news", "again"]) != b":1\r\n" {
        assert!(Instant::now() < deadline, "the closed subscriber stayed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Parses `*2 $n cursor *m elements...` (bulk strings only).
fn parse_scan(reply: &[u8]) -> (String, Vec<String>) {
    let text = String::from_utf8_lossy(reply).into_owned();
    let lines: Vec<&str> = text.split("\r\n").collect();
    let cursor = lines[2].to_owned();
    let items = lines[4..]
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| c[1].to_owned())
        .collect();
    (cursor, items)
}

#[test]
fn element_scans_of_large_collections_return_every_element() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    let mut args = vec!["SADD".to_owned(), "big".to_owned()];
    // Members sharing long prefixes, so that cursors fall inside groups.
    for i in 0..300 {
        args.push(format!("member-with-a-long-prefix-{i:03}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(cmd(&mut c, &a), b":300\r\n");
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = "0".to_owned();
    let mut calls = 0;
    loop {
        let (next, items) = parse_scan(&cmd(&mut c, &["SSCAN", "big", &cursor, "COUNT", "7"]));
        seen.extend(items);
        calls += 1;
        assert!(calls < 1000, "the scan does not end");
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 300);
    // Names shorter than the cursor's 7 bytes.
    let mut h = vec!["HSET".to_owned(), "hh".to_owned()];
    for i in 0..200 {
        h.push(format!("{i:04}"));
        h.push("v".to_owned());
    }
    let a: Vec<&str> = h.iter().map(String::as_str).collect();
    assert_eq!(cmd(&mut c, &a), b":200\r\n");
    let mut fields = std::collections::BTreeSet::new();
    let mut cursor = "0".to_owned();
    loop {
        let (next, items) = parse_scan(&cmd(&mut c, &["HSCAN", "hh", &cursor, "COUNT", "10"]));
        // Field, value pairs: keep the fields.
        fields.extend(items.into_iter().step_by(2));
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(fields.len(), 200);
}

#[test]
fn blmpop_and_bzmpop_block_and_are_served_in_order() {
    let s = TestServer::start(|_| {});
    let mut ctl = s.raw();
    let mut a = s.raw();
    let mut b = s.raw();
    let mut z = s.raw();
    a.command(&[b"BLMPOP", b"0", b"2", b"l1", b"l2", b"LEFT", b"COUNT", b"2"]);
    wait_blocked(&mut ctl, 1);
    b.command(&[b"BLMPOP", b"0", b"1", b"l2", b"RIGHT"]);
    wait_blocked(&mut ctl, 2);
    z.command(&[b"BZMPOP", b"0", b"1", b"z", b"MAX", b"COUNT", b"5"]);
    wait_blocked(&mut ctl, 3);
    // The first blocked takes two from the head, the second the tail.
    assert_eq!(cmd(&mut ctl, &["RPUSH", "l2", "x", "y", "w"]), b":3\r\n");
    assert_eq!(
        a.reply(),
        b"*2\r\n$2\r\nl2\r\n*2\r\n$1\r\nx\r\n$1\r\ny\r\n".to_vec()
    );
    assert_eq!(b.reply(), b"*2\r\n$2\r\nl2\r\n*1\r\n$1\r\nw\r\n".to_vec());
    assert_eq!(cmd(&mut ctl, &["ZADD", "z", "1", "a", "2", "b"]), b":2\r\n");
    assert_eq!(
        z.reply(),
        b"*2\r\n$1\r\nz\r\n*2\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n".to_vec()
    );
    // A timeout replies a null array.
    a.command(&[b"BLMPOP", b"0.05", b"1", b"none", b"LEFT"]);
    assert_eq!(a.reply(), b"*-1\r\n");
    wait_blocked(&mut ctl, 0);
}

#[test]
fn client_unblock_ends_a_blocked_command_with_nil_or_an_error() {
    let s = TestServer::start(|_| {});
    let mut ctl = s.raw();
    let mut a = s.raw();
    let id = String::from_utf8(cmd(&mut a, &["CLIENT", "ID"])).expect("utf-8");
    let id = id.trim_start_matches(':').trim_end().to_owned();
    assert_eq!(cmd(&mut ctl, &["CLIENT", "UNBLOCK", &id]), b":0\r\n");
    a.command(&[b"BLPOP", b"l", b"0"]);
    wait_blocked(&mut ctl, 1);
    assert_eq!(
        cmd(&mut ctl, &["CLIENT", "UNBLOCK", &id, "TIMEOUT"]),
        b":1\r\n"
    );
    assert_eq!(a.reply(), b"*-1\r\n");
    a.command(&[b"BLMPOP", b"0", b"1", b"l", b"LEFT"]);
    wait_blocked(&mut ctl, 1);
    assert_eq!(
        cmd(&mut ctl, &["CLIENT", "UNBLOCK", &id, "ERROR"]),
        b":1\r\n"
    );
    assert_eq!(
        a.reply(),
        b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n".to_vec()
    );
    wait_blocked(&mut ctl, 0);
    assert_eq!(
        cmd(&mut ctl, &["CLIENT", "UNBLOCK", &id, "FOO"]),
        b"-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n".to_vec()
    );
    assert_eq!(
        cmd(&mut ctl, &["CLIENT", "UNBLOCK", "abc"]),
        b"-ERR value is not an integer or out of range\r\n".to_vec()
    );
    // Unblocked, the client and the list work as before.
    a.command(&[b"BLPOP", b"l", b"0"]);
    wait_blocked(&mut ctl, 1);
    assert_eq!(cmd(&mut ctl, &["LPUSH", "l", "v"]), b":1\r\n");
    assert_eq!(a.reply(), b"*2\r\n$1\r\nl\r\n$1\r\nv\r\n");
}

#[test]
fn client_reply_off_and_skip_silence_replies() {
    let s = TestServer::start(|_| {});
    let mut a = s.raw();
    a.command(&[b"CLIENT", b"REPLY", b"OFF"]);
    a.command(&[b"PING", b"silenced"]);
    a.command(&[b"CLIENT", b"REPLY", b"ON"]);
    assert_eq!(a.reply(), b"+OK\r\n");
    a.command(&[b"CLIENT", b"REPLY", b"SKIP"]);
    a.command(&[b"PING", b"skipped"]);
    a.command(&[b"PING", b"heard"]);
    assert_eq!(a.reply(), b"$5\r\nheard\r\n");
    a.command(&[b"CLIENT", b"REPLY", b"SKIP"]);
    a.command(&[b"CLIENT", b"REPLY", b"ON"]);
    assert_eq!(a.reply(), b"+OK\r\n");
    // Subscription confirmations are pushed even with replies off.
    a.command(&[b"CLIENT", b"REPLY", b"OFF"]);
    a.command(&[b"SUBSCRIBE", b"ch"]);
    assert_eq!(
        a.reply(),
        b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n".to_vec()
    );
}

/// Regression (Redis's list suite): a blocked pop whose key became a
/// string inside a transaction got WRONGTYPE; it keeps waiting, while a
/// wrong destination still fails the blocked BRPOPLPUSH.
#[test]
fn a_blocked_pop_waits_past_a_key_of_another_type() {
    let s = TestServer::start(|_| {});
    let mut ctl = s.raw();
    let mut a = s.raw();
    a.command(&[b"BLPOP", b"l", b"0"]);
    wait_blocked(&mut ctl, 1);
    for c in [
        &["MULTI"][..],
        &["LPUSH", "l", "a"],
        &["DEL", "l"],
        &["SET", "l", "foo"],
    ] {
        cmd(&mut ctl, c);
    }
    assert_eq!(cmd(&mut ctl, &["EXEC"]), b"*3\r\n:1\r\n:1\r\n+OK\r\n");
    assert_eq!(cmd(&mut ctl, &["DEL", "l"]), b":1\r\n");
    assert_eq!(cmd(&mut ctl, &["LPUSH", "l", "b"]), b":1\r\n");
    assert_eq!(a.reply(), b"*2\r\n$1\r\nl\r\n$1\r\nb\r\n");
    cmd(&mut ctl, &["SET", "dst", "str"]);
    a.command(&[b"BRPOPLPUSH", b"src", b"dst", b"0"]);
    wait_blocked(&mut ctl, 1);
    assert_eq!(cmd(&mut ctl, &["RPUSH", "src", "x"]), b":1\r\n");
    assert!(a.reply().starts_with(b"-WRONGTYPE"));
    assert_eq!(cmd(&mut ctl, &["LLEN", "src"]), b":1\r\n");
}

fn changes_since_save(r: &mut Raw) -> u64 {
    let info = cmd(r, &["INFO", "persistence"]);
    let info = String::from_utf8_lossy(&info).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO persistence has rdb_changes_since_last_save")
}

/// Redis's bitops suite: SETBIT and BITFIELD count a change only when
/// the string changes.
#[test]
fn changes_since_the_last_save_count_writes_that_change_something() {
    let s = TestServer::start(|_| {});
    let mut r = s.raw();
    let d0 = changes_since_save(&mut r);
    cmd(&mut r, &["SETBIT", "foo", "0", "0"]);
    cmd(&mut r, &["BITFIELD", "foo2", "SET", "i5", "0", "0"]);
    let d1 = changes_since_save(&mut r);
    assert_eq!(d1, d0 + 2, "new keys count");
    cmd(&mut r, &["SETBIT", "foo", "0", "0"]);
    cmd(&mut r, &["BITFIELD", "foo2", "SET", "i5", "0", "0"]);
    assert_eq!(changes_since_save(&mut r), d1, "no change, no count");
    cmd(&mut r, &["SETBIT", "foo", "0", "1"]);
    cmd(&mut r, &["BITFIELD", "foo2", "INCRBY", "i5", "0", "1"]);
    cmd(&mut r, &["SETBIT", "foo", "90", "0"]);
    assert_eq!(changes_since_save(&mut r), d1 + 3);
    assert_eq!(cmd(&mut r, &["SAVE"]), b"+OK\r\n");
    assert_eq!(changes_since_save(&mut r), 0);
}

/// SPOP and SRANDMEMBER of one member seek in a large set instead of
/// reading it all (redis-benchmark's SPOP took 84 ms a call on 100,000
/// members); every pop is still a distinct member and the set empties.
#[test]
fn spop_empties_a_large_set_one_distinct_member_at_a_time() {
    let s = TestServer::start(|_| {});
    let mut r = s.raw();
    let n = 1500;
    let mut sadd = vec!["SADD".to_owned(), "big".to_owned()];
    sadd.extend((0..n).map(|i| format!("element:{i}")));
    let args: Vec<&str> = sadd.iter().map(String::as_str).collect();
    assert_eq!(cmd(&mut r, &args), format!(":{n}\r\n").into_bytes());
    let one = cmd(&mut r, &["SRANDMEMBER", "big"]);
    assert!(one.starts_with(b"$") && String::from_utf8_lossy(&one).contains("element:"));
    let mut seen = std::collections::HashSet::new();
    for _ in 0..n {
        let v = cmd(&mut r, &["SPOP", "big"]);
        assert!(v.starts_with(b"$"), "{}", String::from_utf8_lossy(&v));
        assert!(seen.insert(v), "a member popped twice");
    }
    assert_eq!(cmd(&mut r, &["SPOP", "big"]), b"$-1\r\n");
    assert_eq!(cmd(&mut r, &["EXISTS", "big"]), b":0\r\n");
}

/// ZPOPMIN/ZPOPMAX start past the members popped before (in memory,
/// per version); a member added below (or above) that point, alone or
/// inside the transaction that popped, is still the next one popped.
#[test]
fn pops_start_past_earlier_pops_but_see_members_added_behind_them() {
    let s = TestServer::start(|_| {});
    let mut r = s.raw();
    let mut zadd = vec!["ZADD".to_owned(), "z".to_owned()];
    for i in 0..200 {
        zadd.push((i + 100).to_string());
        zadd.push(format!("m{i}"));
    }
    let args: Vec<&str> = zadd.iter().map(String::as_str).collect();
    assert_eq!(cmd(&mut r, &args), b":200\r\n");
    assert!(cmd(&mut r, &["ZPOPMIN", "z", "50"]).starts_with(b"*100\r\n"));
    assert!(cmd(&mut r, &["ZPOPMAX", "z", "50"]).starts_with(b"*100\r\n"));
    // Behind both ends: the next pops must find them.
    cmd(&mut r, &["ZADD", "z", "1", "low", "1000", "high"]);
    assert_eq!(
        cmd(&mut r, &["ZPOPMIN", "z"]),
        b"*2\r\n$3\r\nlow\r\n$1\r\n1\r\n".to_vec()
    );
    assert_eq!(
        cmd(&mut r, &["ZPOPMAX", "z"]),
        b"*2\r\n$4\r\nhigh\r\n$4\r\n1000\r\n".to_vec()
    );
    assert_eq!(
        cmd(&mut r, &["ZPOPMIN", "z"]),
        b"*2\r\n$3\r\nm50\r\n$3\r\n150\r\n".to_vec()
    );
    // Inside one transaction: pop, then add below, then pop again.
    cmd(&mut r, &["MULTI"]);
    cmd(&mut r, &["ZPOPMIN", "z"]);
    cmd(&mut r, &["ZADD", "z", "2", "low2"]);
    cmd(&mut r, &["ZPOPMIN", "z", "0"]);
    assert_eq!(
        cmd(&mut r, &["EXEC"]),
        b"*3\r\n*2\r\n$3\r\nm51\r\n$3\r\n151\r\n:1\r\n*0\r\n".to_vec()
    );
    assert_eq!(
        cmd(&mut r, &["ZPOPMIN", "z"]),
        b"*2\r\n$4\r\nlow2\r\n$1\r\n2\r\n".to_vec()
    );
    cmd(&mut r, &["MULTI"]);
    cmd(&mut r, &["ZPOPMAX", "z", "2"]);
    cmd(&mut r, &["ZINCRBY", "z", "5000", "m60"]);
    cmd(&mut r, &["EXEC"]);
    assert_eq!(
        cmd(&mut r, &["ZPOPMAX", "z"]),
        b"*2\r\n$3\r\nm60\r\n$4\r\n5160\r\n".to_vec()
    );
    assert_eq!(cmd(&mut r, &["ZCARD", "z"]), b":95\r\n");
}

/// The reads of a sorted set's score index (`ZRANGE`, `ZRANK`, `ZCOUNT`,
/// the `REV` forms) start at the bounds its pops learnt, past the
/// tombstones of the members popped before, and still see a member added
/// behind a bound.
#[test]
fn index_reads_after_many_pops_answer_as_before() {
    let s = TestServer::start(|_| {});
    let mut r = s.raw();
    let mut zadd = vec!["ZADD".to_owned(), "z".to_owned()];
    for i in 0..2000 {
        zadd.push((i + 100).to_string());
        zadd.push(format!("m{i}"));
    }
    let args: Vec<&str> = zadd.iter().map(String::as_str).collect();
    assert_eq!(cmd(&mut r, &args), b":2000\r\n");
    for _ in 0..1500 {
        cmd(&mut r, &["ZPOPMIN", "z"]);
    }
    for _ in 0..400 {
        cmd(&mut r, &["ZPOPMAX", "z"]);
    }
    // Left: m1500..m1599, scores 1600..1699.
    let want = |names: &[&str]| {
        let mut s = format!("*{}\r\n", names.len());
        for n in names {
            s += &format!("${}\r\n{n}\r\n", n.len());
        }
        s.into_bytes()
    };
    assert_eq!(
        cmd(&mut r, &["ZRANGE", "z", "0", "2"]),
        want(&["m1500", "m1501", "m1502"])
    );
    assert_eq!(
        cmd(&mut r, &["ZRANGE", "z", "0", "0", "REV"]),
        want(&["m1599"])
    );
    assert_eq!(
        cmd(&mut r, &["ZRANGEBYSCORE", "z", "-inf", "1601"]),
        want(&["m1500", "m1501"])
    );
    assert_eq!(cmd(&mut r, &["ZRANK", "z", "m1510"]), b":10\r\n");
    assert_eq!(cmd(&mut r, &["ZREVRANK", "z", "m1590"]), b":9\r\n");
    assert_eq!(cmd(&mut r, &["ZCOUNT", "z", "-inf", "+inf"]), b":100\r\n");
    // Behind both bounds: the reads find them.
    cmd(&mut r, &["ZADD", "z", "1", "low", "5000", "high"]);
    assert_eq!(
        cmd(&mut r, &["ZRANGE", "z", "0", "1"]),
        want(&["low", "m1500"])
    );
    assert_eq!(
        cmd(&mut r, &["ZRANGE", "z", "0", "0", "REV"]),
        want(&["high"])
    );
    assert_eq!(cmd(&mut r, &["ZRANK", "z", "m1510"]), b":11\r\n");
    assert_eq!(cmd(&mut r, &["ZCARD", "z"]), b":102\r\n");
    assert_eq!(cmd(&mut r, &["ZCOUNT", "z", "-inf", "+inf"]), b":102\r\n");
}

/// `MONITOR` shows each command once it has run, in redis-server's line
/// format, with `MULTI`, the transaction's commands, then `EXEC`, and
/// nothing for a refused command or for its own `MONITOR`.
#[test]
fn monitor_shows_commands_once_run() {
    let s = TestServer::start(|_| {});
    let mut mon = s.raw();
    let mut c = s.raw();
    assert_eq!(cmd(&mut mon, &["MONITOR"]), b"+OK\r\n");
    cmd(&mut c, &["SET", "foo", "a b\"c"]);
    cmd(&mut c, &["NOSUCHCOMMAND"]);
    cmd(&mut c, &["MULTI"]);
    cmd(&mut c, &["RPUSH", "l", "x"]);
    cmd(&mut c, &["EXEC"]);
    cmd(&mut c, &["AUTH", "secret"]);
    let mut lines = Vec::new();
    for _ in 0..5 {
        let line = mon.reply();
        let text = String::from_utf8(line).expect("utf-8");
        // "+<secs>.<micros> [0 <addr>] <args>\r\n"
        let (stamp, rest) = text.split_once(' ').expect("a stamp");
        let (secs, micros) = stamp[1..].split_once('.').expect("secs.micros");
        assert!(secs.parse::<u64>().is_ok() && micros.len() == 6, "{text:?}");
        let (_, args) = rest.split_once("] ").expect("[db addr]");
        lines.push(args.trim_end().to_owned());
    }
    assert_eq!(
        lines,
        [
            r#""SET" "foo" "a b\"c""#,
            r#""MULTI""#,
            r#""RPUSH" "l" "x""#,
            r#""EXEC""#,
            r#""AUTH" "(redacted)""#,
        ]
    );
}

/// A pipeline of writes runs as one batch: every reply is the one the
/// command gets alone, a failing command in the middle fails alone, and
/// each command sees the writes of those before it.
#[test]
fn a_pipeline_of_writes_answers_as_one_by_one() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    let script: &[&[&str]] = &[
        &["RPUSH", "l", "a"],
        &["SET", "s", "1"],
        &["INCR", "s"],
        &["LPUSH", "s", "x"],
        &["RPUSH", "l", "b"],
        &["INCRBY", "s", "nan"],
        &["SADD", "st", "m", "n"],
        &["SPOP", "st"],
        &["SREM", "st", "m", "n"],
        &["DEL", "st"],
        &["LPOP", "l"],
    ];
    let mut all = Vec::new();
    for a in script {
        let a: Vec<&[u8]> = a.iter().map(|s| s.as_bytes()).collect();
        all.extend(common::encode(&a));
    }
    c.send(&all);
    let replies: Vec<Vec<u8>> = script.iter().map(|_| c.reply()).collect();
    let fixed = |i: usize| replies[i].clone();
    assert_eq!(fixed(0), b":1\r\n");
    assert_eq!(fixed(1), b"+OK\r\n");
    assert_eq!(fixed(2), b":2\r\n");
    assert!(fixed(3).starts_with(b"-WRONGTYPE"), "{:?}", fixed(3));
    assert_eq!(fixed(4), b":2\r\n");
    assert!(fixed(5).starts_with(b"-ERR value is not an integer"));
    assert_eq!(fixed(6), b":2\r\n");
    assert!(fixed(7) == b"$1\r\nm\r\n" || fixed(7) == b"$1\r\nn\r\n");
    assert_eq!(fixed(8), b":1\r\n");
    assert_eq!(fixed(9), b":0\r\n");
    assert_eq!(fixed(10), b"$1\r\na\r\n");
    assert_eq!(
        cmd(&mut c, &["LRANGE", "l", "0", "-1"]),
        b"*1\r\n$1\r\nb\r\n"
    );
    assert_eq!(cmd(&mut c, &["GET", "s"]), b"$1\r\n2\r\n");
}

/// `SPOP` of a set too large to read whole (it seeks a random member,
/// starting from the bounds its earlier pops learnt) pops every member
/// exactly once, members added between pops included, and answers nil
/// once the set is empty.
#[test]
fn spop_drains_a_large_set_exactly() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    let mut expected = std::collections::BTreeSet::new();
    let mut batch = Vec::new();
    for i in 0..3000 {
        let m = format!("element:{i:06}");
        batch.extend(common::encode(&[b"SADD", b"big", m.as_bytes()]));
        expected.insert(m);
    }
    c.send(&batch);
    for _ in 0..3000 {
        assert_eq!(c.reply(), b":1\r\n");
    }
    let mut popped = std::collections::BTreeSet::new();
    let mut round = 0;
    loop {
        // Pipelined pops, and now and then members past either end.
        let mut batch = Vec::new();
        for _ in 0..16 {
            batch.extend(common::encode(&[b"SPOP", b"big"]));
        }
        if round < 20 {
            for m in [format!("a{round:03}"), format!("z{round:03}")] {
                batch.extend(common::encode(&[b"SADD", b"big", m.as_bytes()]));
                expected.insert(m);
            }
        }
        c.send(&batch);
        let mut nil = false;
        for _ in 0..16 {
            let r = c.reply();
            if r == b"$-1\r\n" {
                nil = true;
                continue;
            }
            let text = String::from_utf8(r).expect("utf-8");
            let m = text.split("\r\n").nth(1).expect("a bulk").to_owned();
            assert!(popped.insert(m.clone()), "{m} popped twice");
        }
        if round < 20 {
            assert_eq!(c.reply(), b":1\r\n");
            assert_eq!(c.reply(), b":1\r\n");
        }
        round += 1;
        if nil && round > 20 {
            break;
        }
        assert!(round < 1000, "the set does not drain");
    }
    assert_eq!(popped, expected);
    assert_eq!(cmd(&mut c, &["EXISTS", "big"]), b":0\r\n");
}

/// A popped member added back lies inside a stretch an earlier pop
/// walked (a hole its later seeks jump over): the add takes it out of
/// the hole, so it is popped in turn, and the set still drains exactly.
/// The pops come out in no order.
#[test]
fn spop_finds_members_added_back_where_earlier_pops_walked() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    let n = 3000;
    let mut batch = Vec::new();
    for i in 0..n {
        let m = format!("element:{i:06}");
        batch.extend(common::encode(&[b"SADD", b"big", m.as_bytes()]));
    }
    c.send(&batch);
    for _ in 0..n {
        assert_eq!(c.reply(), b":1\r\n");
    }
    let mut order = Vec::new();
    let mut pops_of = std::collections::BTreeMap::<String, usize>::new();
    let mut adds_of: std::collections::BTreeMap<String, usize> =
        (0..n).map(|i| (format!("element:{i:06}"), 1)).collect();
    let mut added_back = 0;
    loop {
        let mut batch = Vec::new();
        for _ in 0..16 {
            batch.extend(common::encode(&[b"SPOP", b"big"]));
        }
        c.send(&batch);
        let mut got = Vec::new();
        for _ in 0..16 {
            let r = c.reply();
            if r != b"$-1\r\n" {
                let text = String::from_utf8(r).expect("utf-8");
                got.push(text.split("\r\n").nth(1).expect("a bulk").to_owned());
            }
        }
        if got.is_empty() {
            break;
        }
        // Every fourth batch, two of its pops go back in, alone and
        // pipelined behind a pop.
        if order.len() % 64 == 0 && added_back < 200 {
            for m in got.iter().take(2) {
                let r = cmd(&mut c, &["SADD", "big", m]);
                assert_eq!(r, b":1\r\n");
                *adds_of.get_mut(m).expect("a member") += 1;
                added_back += 1;
            }
        }
        for m in got {
            *pops_of.entry(m.clone()).or_default() += 1;
            order.push(m);
        }
        assert!(order.len() < 2 * n, "the set does not drain");
    }
    assert_eq!(cmd(&mut c, &["EXISTS", "big"]), b":0\r\n");
    assert_eq!(order.len(), n + added_back);
    assert_eq!(pops_of, adds_of, "each member popped once per add");
    let rising = order[..200].windows(2).filter(|w| w[0] < w[1]).count();
    assert!(
        (40..160).contains(&rising),
        "the first 200 pops look ordered: {rising} rises"
    );
}

/// `HMGET` of most fields of a small hash reads it in one walk: it sees
/// the writes staged before it in the same `EXEC`, answers nil for the
/// fields it lacks, in the order asked; a large hash is read field by
/// field, with the same answers.
#[test]
fn hmget_reads_a_small_hash_whole_and_sees_staged_writes() {
    let s = TestServer::start(|_| {});
    let mut r = s.raw();
    assert_eq!(
        cmd(&mut r, &["HSET", "h", "a", "1", "b", "2", "c", "3"]),
        b":3\r\n"
    );
    assert_eq!(
        cmd(&mut r, &["HMGET", "h", "zz", "c", "a"]),
        b"*3\r\n$-1\r\n$1\r\n3\r\n$1\r\n1\r\n"
    );
    assert_eq!(cmd(&mut r, &["MULTI"]), b"+OK\r\n");
    assert_eq!(
        cmd(&mut r, &["HSET", "h", "b", "new", "d", "4"]),
        b"+QUEUED\r\n"
    );
    assert_eq!(cmd(&mut r, &["HDEL", "h", "a"]), b"+QUEUED\r\n");
    assert_eq!(
        cmd(&mut r, &["HMGET", "h", "a", "b", "c", "d"]),
        b"+QUEUED\r\n"
    );
    assert_eq!(
        cmd(&mut r, &["EXEC"]),
        b"*3\r\n:1\r\n:1\r\n*4\r\n$-1\r\n$3\r\nnew\r\n$1\r\n3\r\n$1\r\n4\r\n"
    );
    let mut big = vec!["HSET".to_owned(), "big".to_owned()];
    for i in 0..100 {
        big.push(format!("f{i}"));
        big.push(format!("v{i}"));
    }
    let args: Vec<&str> = big.iter().map(String::as_str).collect();
    assert_eq!(cmd(&mut r, &args), b":100\r\n");
    assert_eq!(
        cmd(&mut r, &["HMGET", "big", "f7", "nope"]),
        b"*2\r\n$2\r\nv7\r\n$-1\r\n"
    );
}

/// Pipelined pops of a sorted set share one engine walk (a pop reads
/// ahead for those after it): mixed with adds below the smallest member,
/// removals of members read ahead, counted pops and pops from the other
/// end, every reply is the one a model of the sorted set gives.
#[test]
fn pipelined_zset_pops_answer_as_the_model_says() {
    let s = TestServer::start(|_| {});
    let mut c = s.raw();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_nanos() as u64;
    // A small xorshift: the test needs no rand dependency.
    let mut x = seed | 1;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut model = std::collections::BTreeSet::<(i64, String)>::new();
    let mut batch = Vec::new();
    for i in 0..400 {
        let (score, m) = (i * 10, format!("m{i:04}"));
        batch.extend(common::encode(&[
            b"ZADD",
            b"z",
            score.to_string().as_bytes(),
            m.as_bytes(),
        ]));
        model.insert((score, m));
    }
    c.send(&batch);
    for _ in 0..400 {
        assert_eq!(c.reply(), b":1\r\n", "seed {seed}");
    }
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    let popped = |model: &mut std::collections::BTreeSet<(i64, String)>, n: usize, max: bool| {
        let mut r = Vec::new();
        for _ in 0..n {
            let e = if max {
                model.pop_last()
            } else {
                model.pop_first()
            };
            match e {
                Some((s, m)) => r.push((s, m)),
                None => break,
            }
        }
        let mut out = format!("*{}\r\n", r.len() * 2);
        for (s, m) in r {
            out += &bulk(&m);
            out += &bulk(&s.to_string());
        }
        out
    };
    for round in 0..60 {
        let mut batch = Vec::new();
        let mut want = Vec::new();
        for _ in 0..16 {
            let args: Vec<String> = match rnd(10) {
                0 => {
                    // Below (or among) the smallest: popped next.
                    let m = format!("n{}", rnd(100_000));
                    let score = model.first().map_or(0, |(s, _)| *s) - rnd(3) as i64;
                    let new = !model.iter().any(|(_, x)| *x == m);
                    model.retain(|(_, x)| *x != m);
                    model.insert((score, m.clone()));
                    want.push(format!(":{}\r\n", i64::from(new)));
                    vec!["ZADD".into(), "z".into(), score.to_string(), m]
                }
                1 => {
                    // A member a pop before may have read ahead.
                    let m = match model.iter().nth(rnd(4) as usize) {
                        Some((_, m)) => m.clone(),
                        None => "none".to_owned(),
                    };
                    let had = model.iter().any(|(_, x)| *x == m);
                    model.retain(|(_, x)| *x != m);
                    want.push(format!(":{}\r\n", i64::from(had)));
                    vec!["ZREM".into(), "z".into(), m]
                }
                2 => {
                    let n = rnd(4) as usize;
                    want.push(popped(&mut model, n, false));
                    vec!["ZPOPMIN".into(), "z".into(), n.to_string()]
                }
                3 => {
                    want.push(popped(&mut model, 1, true));
                    vec!["ZPOPMAX".into(), "z".into()]
                }
                _ => {
                    want.push(popped(&mut model, 1, false));
                    vec!["ZPOPMIN".into(), "z".into()]
                }
            };
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            batch.extend(common::encode(&args));
        }
        c.send(&batch);
        for (i, w) in want.iter().enumerate() {
            let got = String::from_utf8(c.reply()).expect("utf-8");
            assert_eq!(&got, w, "seed {seed}, round {round}, command {i}");
        }
    }
    assert_eq!(
        cmd(&mut c, &["ZCARD", "z"]),
        format!(":{}\r\n", model.len()).into_bytes(),
        "seed {seed}"
    );
}
