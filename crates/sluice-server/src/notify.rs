//! Keyspace notifications (`notify-keyspace-events`): a command that
//! changes a key publishes, once its writes are committed, the event on
//! `__keyspace@<db>__:<key>` (message: the event's name) and the key on
//! `__keyevent@<db>__:<event>`, as redis-server does, for the classes the
//! setting enables. Off by default, as in redis-server: a command then
//! records nothing.

use bytes::Bytes;

use crate::server::Server;

/// `K`: events on `__keyspace@0__:<key>`.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: events on `__keyevent@0__:<event>`.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (`DEL`, `EXPIRE`, `RENAME`...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted-set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: a key deleted because it expired.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key evicted (never: the server does not evict).
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands (none served).
pub const STREAM: u32 = 1 << 10;
/// `m`: a key missed (accepted, not published).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events (none).
pub const MODULE: u32 = 1 << 12;
/// `n`: a key created.
pub const NEW: u32 = 1 << 13;

/// The event named by a command of a family (`name`, as dispatched) among
/// that family's event names, which outlive the command (`Txn::notify`);
/// the last of `names` when none matches.
pub fn event_of(name: &str, names: &[&'static str]) -> &'static str {
    names
        .iter()
        .copied()
        .find(|e| *e == name)
        .unwrap_or(names[names.len() - 1])
}
/// `A`: `g$lshzxetd`.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The setting's letters, in redis-server's order for `CONFIG GET`.
const LETTERS: &[(u8, u32)] = &[
    (b'g', GENERIC),
    (b'$', STRING),
    (b'l', LIST),
    (b's', SET),
    (b'h', HASH),
    (b'z', ZSET),
    (b'x', EXPIRED),
    (b'e', EVICTED),
    (b't', STREAM),
    (b'd', MODULE),
    (b'n', NEW),
];

/// Parses a `notify-keyspace-events` value; `None` for an unknown letter.
pub fn parse(v: &str) -> Option<u32> {
    let mut flags = 0;
    for c in v.bytes() {
        flags |= match c {
            b'A' => ALL,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b'm' => KEY_MISS,
            _ => LETTERS.iter().find(|(l, _)| *l == c)?.1,
        };
    }
    Some(flags)
}

/// The setting as `CONFIG GET` shows it: `A` for all classes (else
/// their letters), then `K`, `E` and `m`.
pub fn format(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        // redis-server drops `n` here too.
        s.push('A');
    } else {
        for (l, f) in LETTERS {
            if flags & f != 0 {
                s.push(*l as char);
            }
        }
    }
    for (l, f) in [('K', KEYSPACE), ('E', KEYEVENT), ('m', KEY_MISS)] {
        if flags & f != 0 {
            s.push(l);
        }
    }
    s
}

/// One event a command caused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub class: u32,
    pub name: &'static str,
    /// The database of the key (`SELECT`).
    pub db: u8,
    pub key: Vec<u8>,
}

/// Publishes `events` under the flags they were recorded with.
pub fn publish(server: &Server, flags: u32, events: &[Event]) {
    for e in events {
        if flags & e.class == 0 {
            continue;
        }
        if flags & KEYSPACE != 0 {
            let mut channel = format!("__keyspace@{}__:", e.db).into_bytes();
            channel.extend_from_slice(&e.key);
            server.pubsub.publish(
                &Bytes::from(channel),
                &Bytes::from_static(e.name.as_bytes()),
            );
        }
        if flags & KEYEVENT != 0 {
            let channel = format!("__keyevent@{}__:{}", e.db, e.name);
            server
                .pubsub
                .publish(&Bytes::from(channel), &Bytes::copy_from_slice(&e.key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_reads_back_as_redis_server_writes_it() {
        for (set, get) in [
            ("gKE", "gKE"),
            ("$lshzxeKE", "$lshzxeKE"),
            ("KA", "AK"),
            ("EA", "AE"),
            ("", ""),
            ("Kz", "zK"),
            ("AnE", "AE"),
            ("nE", "nE"),
        ] {
            assert_eq!(format(parse(set).unwrap()), get, "{set}");
        }
        assert_eq!(parse("Kq"), None);
    }
}
