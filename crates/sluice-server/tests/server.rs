//! `sluice serve` through a real client library (the `redis` crate) and
//! raw RESP: commands, pipelining, RESP3, transactions, concurrency,
//! expiry, AUTH, limits and persistence.

mod common;

use std::collections::HashSet;
use std::thread;
use std::time::Duration;

use common::{Raw, TestServer};
use redis::{Commands, RedisResult};

#[test]
fn strings_and_keys_behave_like_redis() {
    let s = TestServer::start(|_| {});
    let mut c = s.client();
    let _: () = c.set("k", "v").unwrap();
    assert_eq!(c.get::<_, String>("k").unwrap(), "v");
    assert_eq!(c.get::<_, Option<String>>("missing").unwrap(), None);
    assert!(!c.set_nx::<_, _, bool>("k", "w").unwrap());
    assert!(c.set_nx::<_, _, bool>("k2", "w").unwrap());
    assert_eq!(c.append::<_, _, i64>("k", "xyz").unwrap(), 4);
    assert_eq!(c.strlen::<_, i64>("k").unwrap(), 4);
    assert_eq!(c.getrange::<_, String>("k", 1, -2).unwrap(), "xy");
    assert_eq!(c.setrange::<_, _, i64>("k", 6, "!").unwrap(), 7);
    assert_eq!(c.get::<_, Vec<u8>>("k").unwrap(), b"vxyz\0\0!");
    assert_eq!(c.getset::<_, _, String>("k", "new").unwrap(), "vxyz\0\0!");
    assert_eq!(c.get_del::<_, String>("k").unwrap(), "new");
    assert!(!c.exists::<_, bool>("k").unwrap());
    let _: () = c.mset(&[("a", "1"), ("b", "2")]).unwrap();
    let got: Vec<Option<String>> = c.mget(&["a", "b", "zz"]).unwrap();
    assert_eq!(got, vec![Some("1".into()), Some("2".into()), None]);
    assert_eq!(c.incr::<_, _, i64>("a", 41).unwrap(), 42);
    assert_eq!(c.decr::<_, _, i64>("a", 2).unwrap(), 40);
    let f: f64 = redis::cmd("INCRBYFLOAT")
        .arg("a")
        .arg("0.5")
        .query(&mut c)
        .unwrap();
    assert_eq!(f, 40.5);
    let e: RedisResult<i64> = c.incr("a", 1);
    assert_eq!(
        e.unwrap_err().to_string(),
        "An error was signalled by the server - ResponseError: value is not an integer or out of range"
    );
    let _: () = c.set("max", i64::MAX).unwrap();
    assert!(c.incr::<_, _, i64>("max", 1).is_err());
    assert_eq!(
        c.get::<_, i64>("max").unwrap(),
        i64::MAX,
        "a failed INCR changes nothing"
    );
    assert_eq!(c.del::<_, i64>(&["a", "b", "zz"]).unwrap(), 2);
    let _: () = c.rename("k2", "k3").unwrap();
    assert_eq!(c.get::<_, String>("k3").unwrap(), "w");
    assert!(c.rename::<_, _, ()>("nope", "x").is_err());
    let t: String = redis::cmd("TYPE").arg("k3").query(&mut c).unwrap();
    assert_eq!(t, "string");
    let t: String = redis::cmd("TYPE").arg("nope").query(&mut c).unwrap();
    assert_eq!(t, "none");
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 2); // k3 and max
    let mut keys: Vec<String> = c.keys("*").unwrap();
    keys.sort();
    assert_eq!(keys, vec!["k3", "max"]);
    let r: Option<String> = redis::cmd("RANDOMKEY").query(&mut c).unwrap();
    assert!(matches!(r.as_deref(), Some("k3" | "max")));
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0);
    let r: Option<String> = redis::cmd("RANDOMKEY").query(&mut c).unwrap();
    assert_eq!(r, None);
}

#[test]
fn set_options_and_expiry() {
    let s = TestServer::start(|_| {});
    let mut c = s.client();
    let r: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None, "XX on a missing key sets nothing");
    let r: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("NX")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None);
    let r: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("w")
        .arg("GET")
        .arg("EX")
        .arg(100)
        .query(&mut c)
        .unwrap();
    assert_eq!(r.as_deref(), Some("v"));
    let ttl: i64 = c.ttl("k").unwrap();
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("x")
        .arg("KEEPTTL")
        .query(&mut c)
        .unwrap();
    assert!(c.ttl::<_, i64>("k").unwrap() > 0, "KEEPTTL keeps it");
    assert!(c.persist::<_, bool>("k").unwrap());
    assert_eq!(c.ttl::<_, i64>("k").unwrap(), -1);
    assert_eq!(c.ttl::<_, i64>("nope").unwrap(), -2);
    let e: RedisResult<()> = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("EX")
        .arg(0)
        .query(&mut c);
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("invalid expire time in 'set' command"));
    let e: RedisResult<()> = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("NX")
        .arg("XX")
        .query(&mut c);
    assert!(e.unwrap_err().to_string().contains("syntax error"));
    // Expiry: invisible at once, reaped in the background.
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("t{i}"))
            .arg("v")
            .arg("PX")
            .arg(50)
            .query(&mut c)
            .unwrap();
    }
    assert!(c.expire::<_, bool>("k", 1).unwrap());
    assert!(!c.expire::<_, bool>("nope", 1).unwrap());
    let _: () = redis::cmd("SETEX")
        .arg("s")
        .arg(100)
        .arg("v")
        .query(&mut c)
        .unwrap();
    let pttl: i64 = c.pttl("s").unwrap();
    assert!(pttl > 99_000 && pttl <= 100_000, "pttl {pttl}");
    let gx: String = redis::cmd("GETEX")
        .arg("s")
        .arg("PERSIST")
        .query(&mut c)
        .unwrap();
    assert_eq!(gx, "v");
    assert_eq!(c.ttl::<_, i64>("s").unwrap(), -1);
    // A plain SET over an expiring key drops its expiry; the reaper, when
    // it reaches the old expiry's index entry, leaves the key alone.
    let _: () = redis::cmd("SET")
        .arg("over")
        .arg("v")
        .arg("PX")
        .arg(50)
        .query(&mut c)
        .unwrap();
    let _: () = c.set("over", "v2").unwrap();
    assert_eq!(c.ttl::<_, i64>("over").unwrap(), -1);
    thread::sleep(Duration::from_millis(1200));
    assert_eq!(c.get::<_, Option<String>>("t0").unwrap(), None);
    assert_eq!(c.get::<_, Option<String>>("k").unwrap(), None);
    assert_eq!(c.get::<_, String>("over").unwrap(), "v2");
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 2, "only s and over are left");
    // The reaper deleted them from the engine, not just from view. It runs
    // in the background: under a loaded machine it may still be on its way,
    // so wait for it (bounded), and it must never count more.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
        let expired: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("expired_keys:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        assert!(expired <= 51, "INFO: {info}");
        if expired == 51 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "INFO: {info}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn pipelines_and_resp3() {
    let s = TestServer::start(|_| {});
    let mut c = s.client();
    let mut p = redis::pipe();
    for i in 0..2000 {
        p.set(format!("p{i}"), vec![b'x'; 1000]).ignore();
    }
    for i in 0..2000 {
        p.strlen(format!("p{i}"));
    }
    let lens: Vec<i64> = p.query(&mut c).unwrap();
    assert_eq!(lens, vec![1000; 2000]);
    // Raw bytes: the same pipeline in one write, replies in order.
    let mut r = s.raw();
    r.send(b"PING\r\nECHO hi\r\n*2\r\n$3\r\nGET\r\n$4\r\nnone\r\n");
    assert_eq!(r.reply(), b"+PONG\r\n");
    assert_eq!(r.reply(), b"$2\r\nhi\r\n");
    assert_eq!(r.reply(), b"$-1\r\n");
    r.command(&[b"HELLO", b"3"]);
    let hello = r.reply();
    assert!(
        hello.starts_with(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
        "{hello:?}"
    );
    r.command(&[b"GET", b"none"]);
    assert_eq!(r.reply(), b"_\r\n");
    r.command(&[b"CONFIG", b"GET", b"appendfsync"]);
    assert_eq!(r.reply(), b"%1\r\n$11\r\nappendfsync\r\n$8\r\neverysec\r\n");
    r.command(&[b"HELLO", b"4"]);
    assert_eq!(r.reply(), b"-NOPROTO unsupported protocol version\r\n");
    r.command(&[b"NOSUCH", b"a"]);
    assert_eq!(
        r.reply(),
        b"-ERR unknown command 'NOSUCH', with args beginning with: 'a' \r\n"
    );
}

/// The engine's block cache size (its capacity when it gives way to no
/// memtable), from `INFO sluicedb`.
fn cache_capacity(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("sluicedb").query(c).unwrap();
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("block_cache_size_bytes:"))
        .unwrap_or_else(|| panic!("no block cache size in {info}"));
    line.trim().parse().unwrap()
}

#[test]
fn maxmemory_is_the_engines_memory_budget() {
    // At start: 192 MiB shared by the 64 MiB write buffer and the cache.
    let s = TestServer::start(|c| c.maxmemory_bytes = 192 << 20);
    let mut c = s.client();
    assert_eq!(cache_capacity(&mut c), 128 << 20);
    // At run time, as redis-server writes it.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "96mb"])
        .query(&mut c)
        .unwrap();
    assert_eq!(cache_capacity(&mut c), 32 << 20);
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", "maxmemory"])
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["maxmemory", &(96u64 << 20).to_string()]);
    // 0: the preset's 64 MiB cache again.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "0"])
        .query(&mut c)
        .unwrap();
    assert_eq!(cache_capacity(&mut c), 64 << 20);
}

#[test]
fn transactions_are_atomic_and_watch_is_exact() {
    let s = TestServer::start(|_| {});
    let mut c = s.client();
    let (a, b): (i64, i64) = redis::pipe()
        .atomic()
        .incr("a", 1)
        .incr("b", 1)
        .query(&mut c)
        .unwrap();
    assert_eq!((a, b), (1, 1));
    // Queue-time errors abort; run-time errors do not roll back.
    let mut r = s.raw();
    r.send(b"MULTI\r\nSET x 1\r\nNOSUCH\r\nEXEC\r\n");
    assert_eq!(r.reply(), b"+OK\r\n");
    assert_eq!(r.reply(), b"+QUEUED\r\n");
    assert!(r.reply().starts_with(b"-ERR unknown command"));
    assert_eq!(
        r.reply(),
        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    r.send(b"MULTI\r\nSET y abc\r\nINCR y\r\nSET z 1\r\nEXEC\r\n");
    for _ in 0..4 {
        r.reply();
    }
    assert_eq!(
        r.reply(),
        b"*3\r\n+OK\r\n-ERR value is not an integer or out of range\r\n+OK\r\n"
    );
    r.send(b"EXEC\r\nDISCARD\r\n");
    assert_eq!(r.reply(), b"-ERR EXEC without MULTI\r\n");
    assert_eq!(r.reply(), b"-ERR DISCARD without MULTI\r\n");
    // WATCH: another client's write aborts EXEC; a write to another key
    // (even in the same lock stripe) does not.
    let mut w = s.raw();
    w.send(b"WATCH a\r\n");
    assert_eq!(w.reply(), b"+OK\r\n");
    let _: () = c.set("other", 1).unwrap();
    w.send(b"MULTI\r\nSET a 100\r\nEXEC\r\n");
    w.reply();
    w.reply();
    assert_eq!(w.reply(), b"*1\r\n+OK\r\n");
    w.send(b"WATCH a\r\n");
    w.reply();
    let _: () = c.set("a", 5).unwrap();
    w.send(b"MULTI\r\nSET a 100\r\nEXEC\r\n");
    w.reply();
    w.reply();
    assert_eq!(w.reply(), b"*-1\r\n");
    assert_eq!(c.get::<_, i64>("a").unwrap(), 5);
}

#[test]
fn incr_and_exec_are_exact_under_concurrent_clients() {
    let s = TestServer::start(|_| {});
    let url = s.url();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let url = url.clone();
            thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                for i in 0..300 {
                    let _: i64 = c.incr("counter", 1).unwrap();
                    // a and b move together; a reader must never see them apart.
                    let _: (i64, i64) = redis::pipe()
                        .atomic()
                        .incr("a", 1)
                        .incr("b", 1)
                        .query(&mut c)
                        .unwrap();
                    let (x, y): (i64, i64) =
                        c.mget(&["a", "b"]).map(|v: Vec<i64>| (v[0], v[1])).unwrap();
                    assert_eq!(x, y, "thread {t} round {i}: MGET saw half a transaction");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = s.client();
    assert_eq!(c.get::<_, i64>("counter").unwrap(), 1800);
    assert_eq!(c.get::<_, i64>("a").unwrap(), 1800);
}

#[test]
fn scan_returns_every_key_present_throughout() {
    let s = TestServer::start(|_| {});
    let mut c = s.client();
    let stable: HashSet<String> = (0..3000).map(|i| format!("stable:{i}")).collect();
    let mut p = redis::pipe();
    for k in &stable {
        p.set(k, "v").ignore();
    }
    let _: () = p.query(&mut c).unwrap();
    let url = s.url();
    let churn = thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        for i in 0..3000 {
            let _: () = c.set(format!("churn:{i}"), "v").unwrap();
            if i % 2 == 0 {
                let _: i64 = c.del(format!("churn:{}", i / 2)).unwrap();
            }
        }
    });
    let mut seen = HashSet::new();
    let mut cursor = 0u64;
    let mut rounds = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("stable:*")
            .arg("COUNT")
            .arg(100)
            .query(&mut c)
            .unwrap();
        seen.extend(keys);
        rounds += 1;
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    churn.join().unwrap();
    assert!(rounds > 10, "the scan took {rounds} rounds");
    let missing: Vec<_> = stable.difference(&seen).take(5).collect();
    assert!(missing.is_empty(), "SCAN missed {missing:?}");
    assert_eq!(seen.len(), stable.len(), "MATCH kept only stable keys");
}

#[test]
fn auth_is_required_when_a_password_is_set() {
    let s = TestServer::start(|c| c.requirepass = Some("sesame".into()));
    let mut r = s.raw();
    r.command(&[b"GET", b"k"]);
    assert_eq!(r.reply(), b"-NOAUTH Authentication required.\r\n");
    r.command(&[b"AUTH", b"wrong"]);
    assert_eq!(
        r.reply(),
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    // Before AUTH, the stricter limits: more than 10 arguments is refused.
    let mut big = s.raw();
    big.send(b"*11\r\n");
    assert_eq!(
        big.read_to_close(),
        b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
    r.command(&[b"AUTH", b"sesame"]);
    assert_eq!(r.reply(), b"+OK\r\n");
    r.command(&[b"SET", b"k", b"v"]);
    assert_eq!(r.reply(), b"+OK\r\n");
    let url = format!("redis://:sesame@{}/", s.addr());
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    assert_eq!(c.get::<_, String>("k").unwrap(), "v");
}

#[test]
fn hostile_input_gets_an_error_and_a_closed_connection() {
    let s = TestServer::start(|c| {
        c.max_query_buffer_bytes = 4 << 20;
        c.max_bulk_bytes = 1 << 20;
    });
    let cases: [(&[u8], &[u8]); 6] = [
        (
            b"*2147483647\r\n",
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n$4294967296\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$2000000\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\nGET\r\n",
            b"-ERR Protocol error: expected '$', got 'G'\r\n",
        ),
        (
            b"SET \"k v\r\n",
            b"-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
        (
            b"*1\r\n$-5\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
    ];
    for (input, want) in cases {
        let mut r = s.raw();
        r.send(input);
        assert_eq!(
            String::from_utf8_lossy(&r.read_to_close()),
            String::from_utf8_lossy(want),
            "input {:?}",
            String::from_utf8_lossy(input)
        );
    }
    // An inline line past 64 KiB with no newline.
    let mut r = s.raw();
    r.send(&vec![b'a'; 70 * 1024]);
    assert_eq!(
        r.read_to_close(),
        b"-ERR Protocol error: too big inline request\r\n"
    );
    // Arguments adding up past the query buffer limit.
    let mut r = s.raw();
    let mut cmd = b"*5\r\n".to_vec();
    for _ in 0..5 {
        cmd.extend_from_slice(b"$1000000\r\n");
        cmd.extend(std::iter::repeat_n(b'x', 1_000_000));
        cmd.extend_from_slice(b"\r\n");
    }
    let _ = std::io::Write::write_all(&mut r.stream, &cmd);
    let got = r.read_to_close();
    assert!(
        got.starts_with(b"-ERR client query buffer limit reached"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // The server still serves, and what it had is intact.
    let mut c = s.client();
    let _: () = c.set("still", "here").unwrap();
    assert_eq!(c.get::<_, String>("still").unwrap(), "here");
}

#[test]
fn maxclients_refuses_the_next_one() {
    let s = TestServer::start(|c| c.maxclients = 2);
    let mut a = s.raw();
    let mut b = s.raw();
    a.command(&[b"PING"]);
    b.command(&[b"PING"]);
    assert_eq!(a.reply(), b"+PONG\r\n");
    assert_eq!(b.reply(), b"+PONG\r\n");
    let mut c = Raw::connect(s.addr());
    assert_eq!(c.read_to_close(), b"-ERR max number of clients reached\r\n");
}

#[test]
fn data_survives_shutdown_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let running = TestServer::start_in(dir.path(), |c| c.preset = Some(sluicedb::Preset::HashKv));
    let mut c = redis::Client::open(format!("redis://{}/", running.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    for i in 0..500 {
        let _: () = c.set(format!("k{i}"), vec![i as u8; 300]).unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("ttl")
        .arg("v")
        .arg("EX")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    // SHUTDOWN closes the connection without a reply.
    let r: RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut c);
    assert!(r.is_err());
    running.wait().unwrap();
    let running = TestServer::start_in(dir.path(), |_| {});
    let mut c = redis::Client::open(format!("redis://{}/", running.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    for i in 0..500 {
        assert_eq!(
            c.get::<_, Vec<u8>>(format!("k{i}")).unwrap(),
            vec![i as u8; 300]
        );
    }
    assert!(c.ttl::<_, i64>("ttl").unwrap() > 900);
    let info: String = redis::cmd("INFO").arg("server").query(&mut c).unwrap();
    assert!(
        info.contains("preset:hashkv"),
        "the database keeps its preset: {info}"
    );
    running.shutdown().unwrap();
    // A preset asked for that is not the database's: the start fails, naming both,
    // as `sluice serve --preset leveldb` or a config file's `preset leveldb` would.
    let mut config = sluice_server::Config::new(dir.path());
    config.port = 0;
    config.set("preset", "leveldb").unwrap();
    let e = sluice_server::start(config)
        .err()
        .expect("a server over a hashkv database asked for leveldb");
    assert!(
        e.contains("--preset")
            && e.contains("created with preset hashkv")
            && e.contains("name preset leveldb"),
        "{e}"
    );
    // Its own preset named is no mismatch.
    let running = TestServer::start_in(dir.path(), |c| c.preset = Some(sluicedb::Preset::HashKv));
    running.shutdown().unwrap();
}

/// One HTTP/1.1 request to the metrics endpoint: (status line, body).
fn http_get(addr: std::net::SocketAddr, method: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The sample of `name` with exactly `labels` (`{..}` text or ""), parsed.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{labels} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().expect("a number"))
}

#[test]
fn metrics_endpoint_reports_commands_connections_and_engine_stats() {
    let s = TestServer::start(|c| c.metrics = Some("127.0.0.1:0".into()));
    let addr = s
        .running
        .as_ref()
        .unwrap()
        .metrics_addr()
        .expect("metrics on");
    let mut c = s.client();
    for i in 0..7 {
        let _: () = c.set(format!("k{i}"), "v").unwrap();
    }
    for i in 0..3 {
        let _: Option<String> = c.get(format!("k{i}")).unwrap();
    }
    let _: RedisResult<()> = redis::cmd("NOSUCHCMD").query(&mut c);
    let (status, body) = http_get(addr, "GET", "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let count = |cmd: &str| {
        sample(
            &body,
            "sluice_command_duration_seconds_count",
            &format!("{{cmd=\"{cmd}\"}}"),
        )
    };
    assert_eq!(count("set"), Some(7.0), "{body}");
    assert_eq!(count("get"), Some(3.0));
    assert_eq!(count("incr"), None, "unused commands are not listed");
    // Every observation lands in the +Inf bucket.
    assert_eq!(
        sample(
            &body,
            "sluice_command_duration_seconds_bucket",
            "{cmd=\"get\",le=\"+Inf\"}"
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(&body, "sluice_unknown_commands_total", ""),
        Some(1.0)
    );
    assert_eq!(sample(&body, "sluice_connected_clients", ""), Some(1.0));
    assert!(sample(&body, "sluice_connections_received_total", "").unwrap() >= 1.0);
    assert_eq!(
        sample(&body, "sluice_engine_user_written_ops_total", ""),
        Some(7.0),
        "seven SETs, one engine write each"
    );
    assert!(
        sample(
            &body,
            "sluice_engine_written_bytes_total",
            "{class=\"journal\"}"
        )
        .unwrap()
            > 0.0
    );
    assert!(body.contains("# TYPE sluice_engine_flushes_total counter"));
    assert!(sample(&body, "sluice_resident_memory_bytes", "").unwrap() > 0.0);
    assert_eq!(http_get(addr, "GET", "/other").0, "HTTP/1.1 404 Not Found");
    assert_eq!(
        http_get(addr, "POST", "/metrics").0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    let (status, body) = http_get(addr, "HEAD", "/metrics");
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", ""));
}

/// A port in use fails the start before anything is created: the database
/// directory does not appear (it used to be created, and left empty).
#[test]
fn a_port_in_use_creates_no_database() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut config = sluice_server::Config::new(&path);
    config.port = taken.local_addr().unwrap().port();
    let Err(e) = sluice_server::start(config) else {
        panic!("started on a port in use");
    };
    assert!(e.contains("binding"), "{e}");
    assert!(!path.exists(), "{} was created", path.display());
}
