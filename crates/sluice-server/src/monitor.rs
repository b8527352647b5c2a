//! `MONITOR`: every command the server runs, as one line to each client
//! that asked, in redis-server's format:
//!
//! ```text
//! +1700000000.123456 [0 127.0.0.1:51234] "set" "foo" "bar"
//! ```
//!
//! A command is shown once it has run (so `MULTI`, the commands of a
//! transaction, then `EXEC`), unless it was refused before running
//! (unknown, wrong arity) or is one redis-server keeps out (server
//! administration: `CONFIG`, `SHUTDOWN`, `MONITOR` itself...). Passwords
//! are redacted (`AUTH`, `HELLO ... AUTH`). Lines reach a monitor through
//! its connection's inbox, like Pub/Sub messages.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::pubsub::{Message, Outbox};

/// The clients in monitor mode.
#[derive(Debug, Default)]
pub struct Monitors {
    /// How many: checked on every command without taking the lock.
    count: AtomicUsize,
    inner: Mutex<HashMap<u64, Outbox>>,
}

/// Commands redis-server does not show to monitors.
const HIDDEN: &[&str] = &[
    "config",
    "debug",
    "monitor",
    "shutdown",
    "save",
    "bgsave",
    "bgrewriteaof",
    "replicaof",
    "slaveof",
    "sync",
    "psync",
    "acl",
    "failover",
    "module",
];

impl Monitors {
    /// Any monitor listening (a relaxed read: a monitor added while a
    /// command runs may miss that command, as in redis-server).
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    pub fn add(&self, id: u64, outbox: Outbox) {
        let mut m = self.inner.lock();
        m.insert(id, outbox);
        self.count.store(m.len(), Ordering::Relaxed);
    }

    /// Whether client `id` is a monitor.
    pub fn is(&self, id: u64) -> bool {
        self.inner.lock().contains_key(&id)
    }

    pub fn remove(&self, id: u64) {
        let mut m = self.inner.lock();
        if m.remove(&id).is_some() {
            self.count.store(m.len(), Ordering::Relaxed);
        }
    }

    /// Shows a command (`name` lowercased) run by the client at `addr`.
    pub fn feed(&self, name: &str, addr: &str, args: &[Bytes]) {
        if HIDDEN.contains(&name) {
            return;
        }
        let line = Bytes::from(line(now_micros(), addr, name, args));
        for tx in self.inner.lock().values() {
            let _ = tx.send(Message::Line(line.clone()));
        }
    }
}

fn now_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// One monitor line, `\r\n` included.
fn line(micros: u128, addr: &str, name: &str, args: &[Bytes]) -> Vec<u8> {
    let mut l = format!(
        "+{}.{:06} [0 {addr}]",
        micros / 1_000_000,
        micros % 1_000_000
    )
    .into_bytes();
    let redact_from = match name {
        "auth" => 1,
        "hello" => args
            .iter()
            .position(|a| a.eq_ignore_ascii_case(b"auth"))
            .map_or(args.len(), |i| i + 1),
        _ => args.len(),
    };
    for (i, a) in args.iter().enumerate() {
        l.push(b' ');
        // `HELLO`'s `AUTH` takes a user and a password; `SETNAME` after
        // them is shown.
        if i >= redact_from && (name == "auth" || i < redact_from + 2) {
            repr(&mut l, b"(redacted)");
        } else {
            repr(&mut l, a);
        }
    }
    l.extend_from_slice(b"\r\n");
    l
}

/// An argument quoted as redis-server's `sdscatrepr` quotes it.
fn repr(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'"');
    for &c in a {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            c if c.is_ascii_graphic() || c == b' ' => out.push(c),
            c => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<Bytes> {
        a.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    #[test]
    fn a_line_is_formatted_as_redis_server_does() {
        let l = line(
            1_700_000_000_000_042,
            "127.0.0.1:5000",
            "set",
            &args(&["set", "k", "a \"q\"\n\x01"]),
        );
        assert_eq!(
            String::from_utf8(l).unwrap(),
            "+1700000000.000042 [0 127.0.0.1:5000] \"set\" \"k\" \"a \\\"q\\\"\\n\\x01\"\r\n"
        );
    }

    #[test]
    fn passwords_are_redacted() {
        let l = line(0, "a", "auth", &args(&["auth", "u", "p"]));
        assert!(String::from_utf8(l)
            .unwrap()
            .ends_with("\"auth\" \"(redacted)\" \"(redacted)\"\r\n"));
        let l = line(
            0,
            "a",
            "hello",
            &args(&["hello", "2", "AUTH", "u", "p", "SETNAME", "n"]),
        );
        assert!(String::from_utf8(l).unwrap().ends_with(
            "\"hello\" \"2\" \"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"n\"\r\n"
        ));
    }
}
