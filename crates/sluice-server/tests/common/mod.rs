//! A server on an ephemeral loopback port over a temporary directory, and
//! a raw RESP connection for byte-level checks.

#![allow(dead_code, reason = "each test binary uses part of this module")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use sluice_server::{start, Config, Running};

pub struct TestServer {
    pub running: Option<Running>,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub fn start(tweak: impl FnOnce(&mut Config)) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let running = Self::start_in(dir.path(), tweak);
        TestServer {
            running: Some(running),
            dir,
        }
    }

    pub fn start_in(path: &std::path::Path, tweak: impl FnOnce(&mut Config)) -> Running {
        let mut c = Config::new(path);
        c.port = 0;
        tweak(&mut c);
        start(c).expect("server starts")
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.as_ref().expect("running").addr()
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("client")
            .get_connection()
            .expect("connect")
    }

    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr())
    }
}

/// A connection that sends bytes and reads replies as bytes.
pub struct Raw {
    pub stream: TcpStream,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Raw { stream }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// One command as an array of bulk strings.
    pub fn command(&mut self, args: &[&[u8]]) {
        self.send(&encode(args));
    }

    /// Reads exactly one reply (any RESP2/RESP3 type), as bytes.
    pub fn reply(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_value(&mut out);
        out
    }

    /// Reads until the server closes the connection.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = self.stream.read_to_end(&mut out);
        out
    }

    fn byte(&mut self) -> u8 {
        let mut b = [0u8];
        self.stream.read_exact(&mut b).expect("reply byte");
        b[0]
    }

    fn line(&mut self, out: &mut Vec<u8>) -> Vec<u8> {
        let mut line = Vec::new();
        loop {
            let b = self.byte();
            out.push(b);
            if b == b'\n' && line.last() == Some(&b'\r') {
                line.pop();
                return line;
            }
            line.push(b);
        }
    }

    fn read_value(&mut self, out: &mut Vec<u8>) {
        let tag = self.byte();
        out.push(tag);
        let line = self.line(out);
        let n: i64 = std::str::from_utf8(&line)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        match tag {
            b'$' | b'=' | b'!' if n >= 0 => {
                let mut body = vec![0u8; n as usize + 2];
                self.stream.read_exact(&mut body).expect("bulk body");
                out.extend_from_slice(&body);
            }
            b'*' | b'~' | b'>' => {
                for _ in 0..n.max(0) {
                    self.read_value(out);
                }
            }
            b'%' | b'|' => {
                for _ in 0..2 * n.max(0) {
                    self.read_value(out);
                }
            }
            _ => {}
        }
    }
}

pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}
