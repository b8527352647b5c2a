//! `sluice serve --appendfsync always` killed with SIGKILL while clients
//! write: every write it acknowledged is there after a restart.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn serve(dir: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--port", "0", "--appendfsync", "always", "--db"])
        .arg(dir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice serve starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let line = lines.next().expect("a line").expect("utf-8");
    let addr = line.rsplit(" on ").next().expect("an address").to_owned();
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

fn set(s: &mut TcpStream, k: &str, v: &str) -> bool {
    let cmd = format!(
        "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
        k.len(),
        v.len()
    );
    let mut reply = [0u8; 5];
    s.write_all(cmd.as_bytes()).is_ok() && s.read_exact(&mut reply).is_ok() && &reply == b"+OK\r\n"
}

fn get(s: &mut TcpStream, k: &str) -> Vec<u8> {
    let cmd = format!("*2\r\n$3\r\nGET\r\n${}\r\n{k}\r\n", k.len());
    s.write_all(cmd.as_bytes()).expect("send");
    let mut r = BufReader::new(s);
    let mut head = String::new();
    r.read_line(&mut head).expect("reply");
    let n: i64 = head.trim_end()[1..].parse().expect("a bulk length");
    if n < 0 {
        return Vec::new();
    }
    let mut body = vec![0u8; n as usize + 2];
    r.read_exact(&mut body).expect("body");
    body.truncate(n as usize);
    body
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = serve(dir.path());
    // Three clients write their own keys; the server is killed while
    // they are still writing.
    let writers: Vec<_> = (0..3)
        .map(|c| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).expect("connect");
                let mut acked = 0usize;
                while set(&mut s, &format!("c{c}:{acked}"), &format!("value {acked}")) {
                    acked += 1;
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let acked: Vec<usize> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(
        acked.iter().all(|&n| n > 10),
        "the writers got going: {acked:?}"
    );
    let (mut child, addr) = serve(dir.path());
    let mut s = TcpStream::connect(&addr).expect("reconnect");
    for (c, &n) in acked.iter().enumerate() {
        for i in 0..n {
            assert_eq!(
                get(&mut s, &format!("c{c}:{i}")),
                format!("value {i}").into_bytes(),
                "client {c} write {i} of {n} acknowledged writes is lost"
            );
        }
    }
    child.kill().ok();
    child.wait().ok();
}
