//! A server killed (SIGKILL) during HSET/LPUSH/ZADD storms under
//! `appendfsync always` loses no acknowledged element, and its keyspace
//! check passes after every kill: no collection's metadata disagrees with
//! its elements. The server runs in a child process: this test binary
//! itself, re-run with only the ignored `crash_child_server` test, which
//! serves until it is killed.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Raw;

const CHILD_DIR: &str = "SLUICE_CRASH_CHILD_DIR";
const WRITERS: usize = 3;
const ROUNDS: usize = 3;
/// Acknowledged operations per writer before each kill.
const OPS_PER_ROUND: u64 = 40;

#[test]
#[ignore = "the server process of the crash test; run by it"]
fn crash_child_server() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let mut c = sluice_server::Config::new(dir);
    c.port = 0;
    c.appendfsync = sluice_server::Fsync::Always;
    let running = sluice_server::start(c).expect("child server starts");
    println!("PORT {}", running.addr().port());
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn spawn_child(dir: &std::path::Path) -> (Child, SocketAddr) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["crash_child_server", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child server");
    let out = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(out).lines();
    let port = loop {
        let line = lines
            .next()
            .expect("the child printed its port")
            .expect("read");
        if let Some(p) = line.strip_prefix("PORT ") {
            break p.trim().parse::<u16>().expect("a port");
        }
    };
    (child, format!("127.0.0.1:{port}").parse().expect("addr"))
}

fn cmd(r: &mut Raw, args: &[&str]) -> Vec<u8> {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    r.command(&a);
    r.reply()
}

/// One writer: HSET, LPUSH, ZADD of element `i` on its own three keys,
/// counting the operations acknowledged, until its connection dies.
fn storm(addr: SocketAddr, w: usize, acked: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    use std::io::Write;
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(read) = stream.try_clone() else {
        return;
    };
    let mut replies = BufReader::new(read);
    while !stop.load(Ordering::Relaxed) {
        let i = acked.load(Ordering::Relaxed);
        let (h, l, z) = (format!("h{w}"), format!("l{w}"), format!("z{w}"));
        let (f, v) = (format!("f{i}"), format!("v{i}"));
        let mut batch = Vec::new();
        for args in [
            vec!["HSET", &h, &f, &v],
            vec!["RPUSH", &l, &v],
            vec!["ZADD", &z, &i.to_string(), &f],
        ] {
            let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
            batch.extend(common::encode(&a));
        }
        if stream.write_all(&batch).is_err() {
            return;
        }
        // Three integer replies: the element is acknowledged (synced).
        for _ in 0..3 {
            let mut line = String::new();
            match replies.read_line(&mut line) {
                Ok(n) if n > 0 && line.starts_with(':') => {}
                _ => return,
            }
        }
        acked.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn sigkill_during_storms_loses_no_acknowledged_element() {
    let dir = tempfile::tempdir().expect("temp dir");
    let acked: Vec<Arc<AtomicU64>> = (0..WRITERS).map(|_| Arc::new(AtomicU64::new(0))).collect();
    for round in 0..ROUNDS {
        let (mut child, addr) = spawn_child(dir.path());
        // What earlier rounds acknowledged survived the kill.
        let mut c = Raw::connect(addr);
        for (w, a) in acked.iter().enumerate() {
            let n = a.load(Ordering::Relaxed);
            let hlen = cmd(&mut c, &["HLEN", &format!("h{w}")]);
            let llen = cmd(&mut c, &["LLEN", &format!("l{w}")]);
            let zcard = cmd(&mut c, &["ZCARD", &format!("z{w}")]);
            for (what, reply) in [("HLEN", hlen), ("LLEN", llen), ("ZCARD", zcard)] {
                let got: u64 = String::from_utf8_lossy(&reply[1..reply.len() - 2])
                    .parse()
                    .expect("an integer reply");
                // At most the one operation in flight may have landed too.
                assert!(
                    got == n || got == n + 1,
                    "round {round}, writer {w}: {what} is {got}, {n} acknowledged"
                );
            }
            if n > 0 {
                let last = format!("f{}", n - 1);
                assert_eq!(
                    cmd(&mut c, &["ZSCORE", &format!("z{w}"), &last]),
                    format!("${}\r\n{}\r\n", (n - 1).to_string().len(), n - 1).into_bytes()
                );
            }
        }
        // Each writer resumes from what was acknowledged.
        for (w, a) in acked.iter().enumerate() {
            let n = a.load(Ordering::Relaxed);
            for key in [format!("h{w}"), format!("l{w}"), format!("z{w}")] {
                // Drop an unacknowledged extra, so that counts stay exact.
                let len = match key.as_bytes()[0] {
                    b'h' => cmd(&mut c, &["HDEL", &key, &format!("f{n}")]),
                    b'l' if n == 0 => cmd(&mut c, &["DEL", &key]),
                    b'l' => cmd(&mut c, &["LTRIM", &key, "0", &(n - 1).to_string()]),
                    _ => cmd(&mut c, &["ZREM", &key, &format!("f{n}")]),
                };
                assert!(len[0] == b':' || len[0] == b'+');
            }
        }
        drop(c);
        let stop = Arc::new(AtomicBool::new(false));
        let start: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let threads: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (a, s) = (acked[w].clone(), stop.clone());
                std::thread::spawn(move || storm(addr, w, a, s))
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        while acked
            .iter()
            .zip(&start)
            .any(|(a, s)| a.load(Ordering::Relaxed) < s + OPS_PER_ROUND)
        {
            assert!(Instant::now() < deadline, "the writers made no progress");
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().expect("writer");
        }
        let problems = sluice_server::check_keyspace(dir.path(), false).expect("check");
        assert!(problems.is_empty(), "round {round}: {problems:#?}");
    }
}
