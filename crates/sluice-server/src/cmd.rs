//! The command table and dispatch: arity checks, authentication, `MULTI`
//! queueing, the locks each command takes, and the connection and server
//! commands. String and key commands are in `data.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::block::{Parked, WaitState};
use crate::clock::Clock;
use crate::data::{self, int_arg, CmdResult, Ctx, SYNTAX};
use crate::fasthash::FastMap;
use crate::glob;
use crate::resp::Out;
use crate::server::{Client, Server};
use crate::store::{now_ms, Fsync, Held, Txn};

/// How a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads keys: no lock.
    Read,
    /// Writes keys: the stripes of its keys.
    Write,
    /// Reads the whole keyspace (`KEYS`, `SCAN`): no lock.
    ReadAll,
    /// Empties the keyspace: held exclusively.
    Flush,
    /// Connection, server and transaction commands.
    Admin,
}

/// One command's entry (its `COMMAND` reply comes from here too).
pub struct Spec {
    pub name: &'static str,
    /// redis-server's convention: N exactly, -N at least N.
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub kind: Kind,
}

const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    kind: Kind,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        kind,
    }
}

const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom", "fast"];
const WS: &[&str] = &["write"];
const A: &[&str] = &["admin", "noscript", "loading", "stale"];
const C: &[&str] = &["noscript", "loading", "stale", "fast"];
const NA: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth"];
const NA_BUSY: &[&str] = &[
    "noscript",
    "loading",
    "stale",
    "fast",
    "no_auth",
    "allow_busy",
];
const NONE: (i32, i32, i32) = (0, 0, 0);
const K1: (i32, i32, i32) = (1, 1, 1);

/// Every command the server knows, as redis-server 7.0 declares them.
pub static COMMANDS: &[Spec] = &[
    // Strings.
    spec("get", 2, R, K1, Kind::Read),
    spec("set", -3, &["write", "denyoom"], K1, Kind::Write),
    spec("setnx", 3, W, K1, Kind::Write),
    spec("setex", 4, &["write", "denyoom"], K1, Kind::Write),
    spec("psetex", 4, &["write", "denyoom"], K1, Kind::Write),
    spec("getset", 3, W, K1, Kind::Write),
    spec("getdel", 2, &["write", "fast"], K1, Kind::Write),
    spec("getex", -2, &["write", "fast"], K1, Kind::Write),
    spec("mget", -2, R, (1, -1, 1), Kind::Read),
    spec("mset", -3, &["write", "denyoom"], (1, -1, 2), Kind::Write),
    spec("msetnx", -3, &["write", "denyoom"], (1, -1, 2), Kind::Write),
    spec("append", 3, W, K1, Kind::Write),
    spec("strlen", 2, R, K1, Kind::Read),
    spec("getrange", 4, &["readonly"], K1, Kind::Read),
    spec("substr", 4, &["readonly"], K1, Kind::Read),
    spec("setrange", 4, &["write", "denyoom"], K1, Kind::Write),
    spec("incr", 2, W, K1, Kind::Write),
    spec("decr", 2, W, K1, Kind::Write),
    spec("incrby", 3, W, K1, Kind::Write),
    spec("decrby", 3, W, K1, Kind::Write),
    spec("incrbyfloat", 3, W, K1, Kind::Write),
    spec("lcs", -3, &["readonly"], (1, 2, 1), Kind::Read),
    // Bitmaps.
    spec("setbit", 4, W, K1, Kind::Write),
    spec("getbit", 3, R, K1, Kind::Read),
    spec("bitcount", -2, &["readonly"], K1, Kind::Read),
    spec("bitpos", -3, &["readonly"], K1, Kind::Read),
    spec("bitop", -4, &["write", "denyoom"], (2, -1, 1), Kind::Write),
    spec("bitfield", -2, &["write", "denyoom"], K1, Kind::Write),
    spec("bitfield_ro", -2, R, K1, Kind::Read),
    // Keys.
    spec("del", -2, WS, (1, -1, 1), Kind::Write),
    spec("unlink", -2, &["write", "fast"], (1, -1, 1), Kind::Write),
    spec("exists", -2, R, (1, -1, 1), Kind::Read),
    spec("type", 2, R, K1, Kind::Read),
    spec("rename", 3, WS, (1, 2, 1), Kind::Write),
    spec("renamenx", 3, &["write", "fast"], (1, 2, 1), Kind::Write),
    spec("expire", -3, &["write", "fast"], K1, Kind::Write),
    spec("pexpire", -3, &["write", "fast"], K1, Kind::Write),
    spec("expireat", -3, &["write", "fast"], K1, Kind::Write),
    spec("pexpireat", -3, &["write", "fast"], K1, Kind::Write),
    spec("ttl", 2, R, K1, Kind::Read),
    spec("pttl", 2, R, K1, Kind::Read),
    spec("persist", 2, &["write", "fast"], K1, Kind::Write),
    spec("copy", -3, &["write", "denyoom"], (1, 2, 1), Kind::Write),
    spec("move", 3, &["write", "fast"], K1, Kind::Write),
    spec("touch", -2, R, (1, -1, 1), Kind::Read),
    spec("expiretime", 2, R, K1, Kind::Read),
    spec("pexpiretime", 2, R, K1, Kind::Read),
    spec("object", -2, &["readonly"], (2, 2, 1), Kind::Read),
    spec("memory", -2, &["readonly"], (2, 2, 1), Kind::Read),
    spec("dump", 2, &["readonly"], K1, Kind::Read),
    spec("restore", -4, &["write", "denyoom"], K1, Kind::Write),
    spec(
        "sort",
        -2,
        &["write", "denyoom", "movablekeys"],
        K1,
        Kind::Write,
    ),
    spec("sort_ro", -2, &["readonly", "movablekeys"], K1, Kind::Read),
    spec("scan", -2, &["readonly"], NONE, Kind::ReadAll),
    spec("keys", 2, &["readonly"], NONE, Kind::ReadAll),
    spec("dbsize", 1, R, NONE, Kind::ReadAll),
    spec("randomkey", 1, &["readonly"], NONE, Kind::ReadAll),
    spec("flushdb", -1, WS, NONE, Kind::Flush),
    spec("flushall", -1, WS, NONE, Kind::Flush),
    // Hashes.
    spec("hset", -4, W, K1, Kind::Write),
    spec("hmset", -4, W, K1, Kind::Write),
    spec("hsetnx", 4, W, K1, Kind::Write),
    spec("hget", 3, R, K1, Kind::Read),
    spec("hmget", -3, R, K1, Kind::Read),
    spec("hdel", -3, &["write", "fast"], K1, Kind::Write),
    spec("hexists", 3, R, K1, Kind::Read),
    spec("hlen", 2, R, K1, Kind::Read),
    spec("hstrlen", 3, R, K1, Kind::Read),
    spec("hgetall", 2, &["readonly"], K1, Kind::Read),
    spec("hkeys", 2, &["readonly"], K1, Kind::Read),
    spec("hvals", 2, &["readonly"], K1, Kind::Read),
    spec("hincrby", 4, W, K1, Kind::Write),
    spec("hincrbyfloat", 4, W, K1, Kind::Write),
    spec("hscan", -3, &["readonly"], K1, Kind::Read),
    spec("hrandfield", -2, &["readonly"], K1, Kind::Read),
    // Lists.
    spec("lpush", -3, W, K1, Kind::Write),
    spec("rpush", -3, W, K1, Kind::Write),
    spec("lpushx", -3, W, K1, Kind::Write),
    spec("rpushx", -3, W, K1, Kind::Write),
    spec("lpop", -2, &["write", "fast"], K1, Kind::Write),
    spec("rpop", -2, &["write", "fast"], K1, Kind::Write),
    spec("llen", 2, R, K1, Kind::Read),
    spec("lrange", 4, &["readonly"], K1, Kind::Read),
    spec("lindex", 3, &["readonly"], K1, Kind::Read),
    spec("lset", 4, &["write", "denyoom"], K1, Kind::Write),
    spec("linsert", 5, &["write", "denyoom"], K1, Kind::Write),
    spec("lrem", 4, WS, K1, Kind::Write),
    spec("ltrim", 4, WS, K1, Kind::Write),
    spec("lpos", -3, &["readonly"], K1, Kind::Read),
    spec("lmove", 5, &["write", "denyoom"], (1, 2, 1), Kind::Write),
    spec(
        "rpoplpush",
        3,
        &["write", "denyoom"],
        (1, 2, 1),
        Kind::Write,
    ),
    spec(
        "blpop",
        -3,
        &["write", "noscript", "blocking"],
        (1, -2, 1),
        Kind::Write,
    ),
    spec(
        "brpop",
        -3,
        &["write", "noscript", "blocking"],
        (1, -2, 1),
        Kind::Write,
    ),
    spec(
        "blmove",
        6,
        &["write", "denyoom", "noscript", "blocking"],
        (1, 2, 1),
        Kind::Write,
    ),
    spec(
        "brpoplpush",
        4,
        &["write", "denyoom", "noscript", "blocking"],
        (1, 2, 1),
        Kind::Write,
    ),
    spec("lmpop", -4, &["write", "movablekeys"], NONE, Kind::Write),
    spec(
        "blmpop",
        -5,
        &["write", "blocking", "movablekeys"],
        NONE,
        Kind::Write,
    ),
    // Sets.
    spec("sadd", -3, W, K1, Kind::Write),
    spec("srem", -3, &["write", "fast"], K1, Kind::Write),
    spec("sismember", 3, R, K1, Kind::Read),
    spec("smismember", -3, R, K1, Kind::Read),
    spec("scard", 2, R, K1, Kind::Read),
    spec("smembers", 2, &["readonly"], K1, Kind::Read),
    spec("sscan", -3, &["readonly"], K1, Kind::Read),
    spec("spop", -2, &["write", "fast"], K1, Kind::Write),
    spec("srandmember", -2, &["readonly"], K1, Kind::Read),
    spec("smove", 4, &["write", "fast"], (1, 2, 1), Kind::Write),
    spec("sinter", -2, &["readonly"], (1, -1, 1), Kind::Read),
    spec("sunion", -2, &["readonly"], (1, -1, 1), Kind::Read),
    spec("sdiff", -2, &["readonly"], (1, -1, 1), Kind::Read),
    spec(
        "sinterstore",
        -3,
        &["write", "denyoom"],
        (1, -1, 1),
        Kind::Write,
    ),
    spec(
        "sunionstore",
        -3,
        &["write", "denyoom"],
        (1, -1, 1),
        Kind::Write,
    ),
    spec(
        "sdiffstore",
        -3,
        &["write", "denyoom"],
        (1, -1, 1),
        Kind::Write,
    ),
    spec(
        "sintercard",
        -3,
        &["readonly", "movablekeys"],
        NONE,
        Kind::Read,
    ),
    // Sorted sets.
    spec("zadd", -4, W, K1, Kind::Write),
    spec("zincrby", 4, W, K1, Kind::Write),
    spec("zrem", -3, &["write", "fast"], K1, Kind::Write),
    spec("zscore", 3, R, K1, Kind::Read),
    spec("zmscore", -3, R, K1, Kind::Read),
    spec("zcard", 2, R, K1, Kind::Read),
    spec("zcount", 4, R, K1, Kind::Read),
    spec("zlexcount", 4, R, K1, Kind::Read),
    spec("zrange", -4, &["readonly"], K1, Kind::Read),
    spec("zrevrange", -4, &["readonly"], K1, Kind::Read),
    spec("zrangebyscore", -4, &["readonly"], K1, Kind::Read),
    spec("zrevrangebyscore", -4, &["readonly"], K1, Kind::Read),
    spec("zrangebylex", -4, &["readonly"], K1, Kind::Read),
    spec("zrevrangebylex", -4, &["readonly"], K1, Kind::Read),
    spec(
        "zrangestore",
        -5,
        &["write", "denyoom"],
        (1, 2, 1),
        Kind::Write,
    ),
    spec("zrank", 3, R, K1, Kind::Read),
    spec("zrevrank", 3, R, K1, Kind::Read),
    spec("zpopmin", -2, &["write", "fast"], K1, Kind::Write),
    spec("zpopmax", -2, &["write", "fast"], K1, Kind::Write),
    spec(
        "bzpopmin",
        -3,
        &["write", "noscript", "fast", "blocking"],
        (1, -2, 1),
        Kind::Write,
    ),
    spec(
        "bzpopmax",
        -3,
        &["write", "noscript", "fast", "blocking"],
        (1, -2, 1),
        Kind::Write,
    ),
    spec("zremrangebyscore", 4, WS, K1, Kind::Write),
    spec("zremrangebyrank", 4, WS, K1, Kind::Write),
    spec("zremrangebylex", 4, WS, K1, Kind::Write),
    spec(
        "zunionstore",
        -4,
        &["write", "denyoom", "movablekeys"],
        K1,
        Kind::Write,
    ),
    spec(
        "zinterstore",
        -4,
        &["write", "denyoom", "movablekeys"],
        K1,
        Kind::Write,
    ),
    spec(
        "zdiffstore",
        -4,
        &["write", "denyoom", "movablekeys"],
        K1,
        Kind::Write,
    ),
    spec("zunion", -3, &["readonly", "movablekeys"], NONE, Kind::Read),
    spec(
        "zintercard",
        -3,
        &["readonly", "movablekeys"],
        NONE,
        Kind::Read,
    ),
    spec("zinter", -3, &["readonly", "movablekeys"], NONE, Kind::Read),
    spec("zdiff", -3, &["readonly", "movablekeys"], NONE, Kind::Read),
    spec("zscan", -3, &["readonly"], K1, Kind::Read),
    spec("zmpop", -4, &["write", "movablekeys"], NONE, Kind::Write),
    spec("zrandmember", -2, &["readonly"], K1, Kind::Read),
    spec(
        "bzmpop",
        -5,
        &["write", "blocking", "movablekeys"],
        NONE,
        Kind::Write,
    ),
    // Pub/Sub.
    spec(
        "subscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "psubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "unsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "punsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "pubsub",
        -2,
        &["pubsub", "loading", "stale"],
        NONE,
        Kind::Admin,
    ),
    // Transactions.
    spec(
        "multi",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "discard",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "watch",
        -2,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        (1, -1, 1),
        Kind::Admin,
    ),
    spec(
        "unwatch",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        NONE,
        Kind::Admin,
    ),
    // Connection.
    spec("ping", -1, &["fast"], NONE, Kind::Admin),
    spec("echo", 2, &["fast"], NONE, Kind::Admin),
    spec("quit", -1, NA_BUSY, NONE, Kind::Admin),
    spec("reset", 1, NA_BUSY, NONE, Kind::Admin),
    spec(
        "monitor",
        1,
        &["admin", "noscript", "loading", "stale"],
        NONE,
        Kind::Admin,
    ),
    spec("hello", -1, NA, NONE, Kind::Admin),
    spec(
        "auth",
        -2,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "sentinel",
            "allow_busy",
        ],
        NONE,
        Kind::Admin,
    ),
    spec("select", 2, C, NONE, Kind::Admin),
    spec("swapdb", 3, &["write", "fast"], NONE, Kind::Admin),
    spec(
        "client",
        -2,
        &["noscript", "loading", "stale"],
        NONE,
        Kind::Admin,
    ),
    spec("command", -1, &["loading", "stale"], NONE, Kind::Admin),
    // Server.
    spec("info", -1, &["loading", "stale"], NONE, Kind::Admin),
    spec("config", -2, A, NONE, Kind::Admin),
    spec(
        "debug",
        -2,
        &["admin", "noscript", "loading", "stale", "protected"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "save",
        1,
        &["admin", "noscript", "no_async_loading", "no_multi"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "bgsave",
        -1,
        &["admin", "noscript", "no_async_loading"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "lastsave",
        1,
        &["loading", "stale", "fast"],
        NONE,
        Kind::Admin,
    ),
    spec("time", 1, &["loading", "stale", "fast"], NONE, Kind::Admin),
    spec(
        "role",
        1,
        &["noscript", "loading", "stale", "fast"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "readonly",
        1,
        &["loading", "stale", "fast"],
        NONE,
        Kind::Admin,
    ),
    spec(
        "readwrite",
        1,
        &["loading", "stale", "fast"],
        NONE,
        Kind::Admin,
    ),
    spec("function", -2, &["noscript"], NONE, Kind::Admin),
    spec("wait", 3, &["noscript"], NONE, Kind::Admin),
    spec(
        "shutdown",
        -1,
        &[
            "admin",
            "noscript",
            "loading",
            "stale",
            "no_multi",
            "allow_busy",
        ],
        NONE,
        Kind::Admin,
    ),
];

/// The subcommands `COMMAND LIST` names and `CLIENT LIST` reports as a
/// client's last command (`client|list`), as redis-server 7.0 does.
pub static SUBCOMMANDS: &[&str] = &[
    "client|getname",
    "client|help",
    "client|id",
    "client|info",
    "client|kill",
    "client|list",
    "client|no-evict",
    "client|reply",
    "client|setinfo",
    "client|setname",
    "client|unblock",
    "command|count",
    "command|docs",
    "command|getkeys",
    "command|info",
    "command|list",
    "config|get",
    "config|resetstat",
    "config|rewrite",
    "config|set",
    "object|encoding",
    "object|freq",
    "object|help",
    "object|idletime",
    "object|refcount",
    "pubsub|channels",
    "pubsub|help",
    "pubsub|numpat",
    "pubsub|numsub",
    "pubsub|shardchannels",
    "pubsub|shardnumsub",
];

/// A command's full name: `parent|sub` for a known subcommand.
pub fn full_name(spec: &'static Spec, args: &[Bytes]) -> &'static str {
    // (parent, subcommand, full name), looked up by parent: most commands
    // have none, and this runs for every command.
    type Subs = FastMap<&'static str, Vec<(&'static str, &'static str)>>;
    static BY_PARENT: std::sync::OnceLock<Subs> = std::sync::OnceLock::new();
    let by_parent = BY_PARENT.get_or_init(|| {
        let mut m: Subs = FastMap::default();
        for s in SUBCOMMANDS {
            if let Some((p, c)) = s.split_once('|') {
                m.entry(p).or_default().push((c, s));
            }
        }
        m
    });
    if let (Some(sub), Some(subs)) = (args.get(1), by_parent.get(spec.name)) {
        if let Some((_, full)) = subs
            .iter()
            .find(|(c, _)| sub.eq_ignore_ascii_case(c.as_bytes()))
        {
            return full;
        }
    }
    spec.name
}

/// The position in [`COMMANDS`] of `name` (lowercase).
pub fn lookup_index(name: &str) -> Option<usize> {
    static INDEX: std::sync::OnceLock<FastMap<&'static str, usize>> = std::sync::OnceLock::new();
    let index = INDEX.get_or_init(|| {
        COMMANDS
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name, i))
            .collect()
    });
    index.get(name).copied()
}

/// The index of the command named `name` in any case, without
/// allocating (command names are short).
pub fn lookup_bytes(name: &[u8]) -> Option<usize> {
    let mut lower = [0u8; 32];
    let lower = lower.get_mut(..name.len())?;
    for (l, c) in lower.iter_mut().zip(name) {
        *l = c.to_ascii_lowercase();
    }
    lookup_index(std::str::from_utf8(lower).ok()?)
}

/// The spec of `name` (lowercase).
pub fn lookup(name: &str) -> Option<&'static Spec> {
    lookup_index(name).map(|i| &COMMANDS[i])
}

/// The key arguments of a command, by its spec's first/last/step.
pub fn keys_of<'a>(spec: &Spec, args: &'a [Bytes]) -> Vec<&'a [u8]> {
    if spec.flags.contains(&"movablekeys") {
        return movable_keys(spec.name, args);
    }
    if spec.first_key == 0 {
        return Vec::new();
    }
    let last = if spec.last_key < 0 {
        args.len() as i32 + spec.last_key
    } else {
        spec.last_key.min(args.len() as i32 - 1)
    };
    (spec.first_key..=last)
        .step_by(spec.step.max(1) as usize)
        .map(|i| &args[i as usize][..])
        .collect()
}

/// The keys of a command whose keys follow a count (`numkeys`).
fn movable_keys<'a>(name: &str, args: &'a [Bytes]) -> Vec<&'a [u8]> {
    match name {
        "sort_ro" => return vec![&args[1]],
        "sort" => return crate::sort::keys(args),
        _ => {}
    }
    // Where the count is; store forms have the destination first.
    let (dst, at) = match name {
        "zunionstore" | "zinterstore" | "zdiffstore" => (true, 2),
        "blmpop" | "bzmpop" => (false, 2),
        _ => (false, 1),
    };
    let n = args
        .get(at)
        .and_then(|a| data::parse_i64(a))
        .filter(|&n| n > 0)
        .map_or(0, |n| n as usize);
    let mut keys: Vec<&[u8]> = Vec::new();
    if dst {
        keys.push(&args[1]);
    }
    keys.extend(args.iter().skip(at + 1).take(n).map(|a| &a[..]));
    keys
}

/// What the connection does after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Continue,
    /// Send the replies, then close (`QUIT`).
    Close,
    /// Close without a reply and shut the server down (`SHUTDOWN`).
    Shutdown,
    /// The client is parked (`client.parked`) until served or timed out.
    Block,
}

pub fn arity_ok(spec: &Spec, n: usize) -> bool {
    let n = n as i32;
    if spec.arity >= 0 {
        n == spec.arity
    } else {
        n >= -spec.arity
    }
}

/// redis-server's error for a subcommand: unknown, or known with the
/// wrong number of arguments (`known` lists its subcommands).
fn subcommand_error(cmd: &str, sub: &[u8], known: &[&str]) -> String {
    let lower = String::from_utf8_lossy(sub).to_ascii_lowercase();
    if known.contains(&lower.as_str()) {
        format!("ERR wrong number of arguments for '{cmd}|{lower}' command")
    } else {
        format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            String::from_utf8_lossy(sub),
            cmd.to_ascii_uppercase()
        )
    }
}

fn wrong_args(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

fn unknown_command(args: &[Bytes]) -> String {
    let mut rest = String::new();
    for a in &args[1..] {
        if rest.len() >= 128 {
            break;
        }
        let s = String::from_utf8_lossy(a);
        let room = 128 - rest.len();
        let s: String = s.chars().take(room).collect();
        rest.push_str(&format!("'{s}' "));
    }
    let name: String = String::from_utf8_lossy(&args[0])
        .chars()
        .take(128)
        .collect();
    format!("ERR unknown command '{name}', with args beginning with: {rest}")
}

/// A command as a connection queues it: its arguments and its place in
/// [`COMMANDS`] (`None`: unknown), looked up once, when it is parsed.
#[derive(Debug)]
pub struct Request {
    pub index: Option<usize>,
    pub args: Vec<Bytes>,
}

impl Request {
    /// `args` as parsed (never empty).
    pub fn new(args: Vec<Bytes>) -> Request {
        Request {
            index: lookup_bytes(&args[0]),
            args,
        }
    }
}

/// Runs one command from `client`, writing its reply to `out`; `clock`
/// times it ([`Clock::lap`]) and gives its wall-clock time.
pub fn execute(
    server: &Server,
    client: &mut Client,
    req: Request,
    out: &mut Out,
    clock: &mut Clock,
) -> After {
    let Request { index, args } = req;
    let spec = index.map(|i| &COMMANDS[i]);
    // Lowercase, as specs name commands; an unknown command's name is not
    // looked at again (its reply quotes the arguments).
    let name = spec.map_or("", |s| s.name);
    client.last_command = spec.map_or("unknown", |s| full_name(s, &args));
    let at = out.buf.len();
    client.skip_this_reply = std::mem::take(&mut client.skip_next_reply);
    // Shown to monitors once run: not when refused or only queued.
    let shown = server.monitors.active()
        && spec.is_some_and(|s| arity_ok(s, args.len()))
        && (client.multi.is_none()
            || matches!(
                name,
                "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
            ));
    let after = dispatch(server, client, name, spec, &args, out, clock.now_ms());
    if shown {
        server
            .monitors
            .feed(name, &client.shared.addr.to_string(), &args);
    }
    let failed = out.buf.get(at) == Some(&b'-');
    // Pub/Sub confirmations are pushed whatever `CLIENT REPLY` says.
    let pushes = matches!(
        name,
        "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe"
    );
    if (client.reply_off || client.skip_this_reply) && !pushes {
        out.buf.truncate(at);
    }
    server.record(index, clock.lap(), failed);
    after
}

fn dispatch(
    server: &Server,
    client: &mut Client,
    name: &str,
    spec: Option<&'static Spec>,
    args: &[Bytes],
    out: &mut Out,
    now_ms: u64,
) -> After {
    let Some(spec) = spec else {
        client.flag_multi_error();
        out.error(&unknown_command(args));
        return After::Continue;
    };
    if !arity_ok(spec, args.len()) {
        client.flag_multi_error();
        out.error(&wrong_args(spec.name));
        return After::Continue;
    }
    if !client.authenticated && !spec.flags.contains(&"no_auth") {
        client.flag_multi_error();
        out.error("NOAUTH Authentication required.");
        return After::Continue;
    }
    let subscribed = !client.channels.is_empty() || !client.patterns.is_empty();
    if subscribed
        && !client.resp3
        && !matches!(
            name,
            "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" | "ping" | "quit" | "reset"
        )
    {
        let full = client.last_command;
        out.error(&format!("ERR Can't execute '{full}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"));
        return After::Continue;
    }
    if client.multi.is_some()
        && !matches!(
            name,
            "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
        )
    {
        if spec.flags.contains(&"no_multi") {
            client.flag_multi_error();
            out.error("ERR Command not allowed inside a transaction");
            return After::Continue;
        }
        if name == "select" && server.replica.get().is_some() {
            // The shard's log carries a transaction without databases.
            client.flag_multi_error();
            out.error("ERR SELECT inside MULTI is not supported on a replicated shard");
            return After::Continue;
        }
        if name == "swapdb" && server.replica.get().is_some() {
            client.flag_multi_error();
            out.error(SWAPDB_REPLICATED);
            return After::Continue;
        }
        if let Some(q) = client.multi.as_mut() {
            q.push(args.to_vec());
        }
        out.simple("QUEUED");
        return After::Continue;
    }
    match spec.kind {
        Kind::Admin => admin(server, client, name, args, out),
        _ => {
            let ran = single(
                server,
                client.db,
                spec,
                args,
                out,
                Some(client.resp3),
                now_ms,
            );
            if let Some(p) = ran.parked {
                *client.shared.parked.lock() = Some(p.waiter.clone());
                client.parked = Some(p);
                return After::Block;
            }
            if server.blocking.any() && !ran.written.is_empty() {
                serve_blocked(server, client.db, ran.written);
            }
            After::Continue
        }
    }
}

/// What running one data command did.
#[derive(Default)]
struct Ran {
    /// The keys it wrote (their blocked clients may now be served).
    written: Vec<Vec<u8>>,
    /// It blocks: nothing to pop (only when parking was allowed).
    would_block: bool,
    parked: Option<Parked>,
}

/// Serves the clients blocked on `keys` of database `db`, first blocked
/// first served, after a write to them; the writes of those served
/// (`BLMOVE` pushes) are served in turn. Called with no lock held.
pub fn serve_blocked(server: &Server, db: u8, keys: Vec<Vec<u8>>) {
    let mut work: std::collections::VecDeque<(u8, Vec<u8>)> =
        keys.into_iter().map(|k| (db, k)).collect();
    while let Some((db, key)) = work.pop_front() {
        while let Some(w) = server.blocking.front(db, &key) {
            let mut st = w.state.lock();
            if *st != WaitState::Waiting {
                drop(st);
                server.blocking.remove(&w);
                continue;
            }
            let name = String::from_utf8_lossy(&w.args[0]).to_ascii_lowercase();
            let Some(spec) = lookup(&name) else {
                break;
            };
            let mut out = Out {
                resp3: w.resp3,
                ..Out::default()
            };
            let ran = single(server, w.db, spec, &w.args, &mut out, None, now_ms());
            if ran.would_block {
                // Nothing for the first in line: the others wait too.
                break;
            }
            *st = WaitState::Served;
            w.send(out.buf);
            drop(st);
            server.blocking.remove(&w);
            work.extend(ran.written.into_iter().map(|k| (w.db, k)));
        }
    }
}

pub fn ctx(server: &Server) -> Ctx {
    Ctx {
        max_bulk_bytes: server.config.read().max_bulk_bytes,
    }
}

/// Runs one data command in database `db` under its locks, committing
/// its writes. A blocking command that finds nothing parks when `park`
/// gives the client's protocol (`Some(resp3)`), under the locks of its
/// keys. Its clock reads `now_ms` (ms since the epoch).
fn single(
    server: &Server,
    db: u8,
    spec: &Spec,
    args: &[Bytes],
    out: &mut Out,
    park: Option<bool>,
    now_ms: u64,
) -> Ran {
    let ks = &server.ks;
    let ctx = ctx(server);
    let mut held = match spec.kind {
        Kind::Write => ks.lock_keys(&keys_of(spec, args)),
        Kind::Flush => ks.lock_all(),
        _ => Held::None,
    };
    let start = out.buf.len();
    // A command holding no lock (a read) may build its keys from the
    // database map before a `SWAPDB` and read after it: then it runs
    // again ([`crate::store::Keyspace::swaps`]); one that locks keeps
    // swaps out.
    let unlocked = matches!(held, Held::None);
    let (mut txn, done) = loop {
        let swaps = ks.swaps();
        let mut txn = if spec.kind == Kind::Read && reads_many(spec.name, args) {
            Txn::at_snapshot(ks, now_ms)
        } else {
            Txn::new_at(ks, now_ms)
        };
        txn.db = db;
        txn.serving_blocked = park.is_none();
        txn.reads_only = matches!(spec.kind, Kind::Read | Kind::ReadAll);
        // A replicated shard runs only reads here, and publishes no event
        // (a lazy expiry would be a write outside its log).
        if server.replica.get().is_none() {
            txn.notify = server.notify_flags.load(Ordering::Relaxed);
            txn.misses = misses_of(spec, args, txn.notify);
        }
        if !unlocked {
            break (txn, None);
        }
        let r = data::run(spec.name, args, &mut txn, &ctx, out);
        if swaps.is_multiple_of(2) && ks.swaps() == swaps {
            break (txn, Some(r));
        }
        out.buf.truncate(start);
        std::thread::yield_now();
    };
    let mut ran = Ran::default();
    let mut events = Vec::new();
    let r = match done {
        Some(r) => r,
        None => data::run(spec.name, args, &mut txn, &ctx, out),
    };
    let r = r.and_then(|()| {
        ran.would_block = txn.would_block;
        events = txn.take_events();
        if txn.has_writes() {
            ran.written = txn.written_keys().to_vec();
            txn.commit(&mut held).map_err(data::engine)
        } else {
            Ok(())
        }
    });
    match r {
        Err(e) => {
            // Nothing was applied (a command checks before it stages, and
            // a batch commits whole or not at all): the reply is the error.
            out.buf.truncate(start);
            out.error(&e);
            ran.written.clear();
            ran.would_block = false;
            events.clear();
        }
        Ok(()) if ran.would_block => {
            if let Some(resp3) = park {
                let keys = keys_of(spec, args).iter().map(|k| k.to_vec()).collect();
                let timeout = crate::list::timeout_arg(timeout_of(spec.name, args)).unwrap_or(0.0);
                let parked = server
                    .blocking
                    .park(db, keys, args.to_vec(), resp3, timeout);
                ran.parked = Some(parked);
            }
        }
        Ok(()) => {}
    }
    drop(held);
    publish_committed(server, &ran.written, events);
    ran
}

/// The keyspace notification classes enabled now.
pub fn txn_flags(server: &Server) -> u32 {
    server.notify_flags.load(Ordering::Relaxed)
}

/// Whether `args`' lookups of missing keys send `keymiss` (`Txn::misses`):
/// those of the commands redis-server 7.0 looks keys up for reading
/// (`lookupKeyRead`), which are its read commands but `OBJECT` and
/// `MEMORY`, and these writes: the reading `GETDEL`, `GETEX`, `GETSET`
/// and `SET ... GET`, and the sources of `COPY`, `SORT`, `BITOP` and
/// the set and sorted-set stores (their destinations are looked at with
/// `Txn::peek`). False unless `keymiss` events are enabled (`flags`).
pub fn misses_of(spec: &Spec, args: &[Bytes], flags: u32) -> bool {
    if flags & crate::notify::KEY_MISS == 0 {
        return false;
    }
    match spec.name {
        "object" | "memory" => false,
        "set" => args[3..].iter().any(|a| a.eq_ignore_ascii_case(b"get")),
        "getdel" | "getex" | "getset" | "copy" | "sort" | "bitop" | "sinterstore"
        | "sunionstore" | "sdiffstore" | "zunionstore" | "zinterstore" | "zdiffstore"
        | "zrangestore" => true,
        _ => matches!(spec.kind, Kind::Read | Kind::ReadAll),
    }
}

/// Publishes the events a command (or a transaction, or a pipelined run)
/// recorded, once its writes are committed, holding no lock. First
/// Redis's lazy expiry, for the keys it found past their expiry (each has
/// its `expired` event in `events`, recorded where it was found): one the
/// commit wrote (`written`) is gone already; any other is deleted now
/// ([`crate::store::Keyspace::expire_if_due`]), and its event dropped if
/// someone else (the reaper, a writer) got there first and reports it.
pub fn publish_committed(
    server: &Server,
    written: &[Vec<u8>],
    mut events: Vec<crate::notify::Event>,
) {
    if events.is_empty() {
        return;
    }
    events.retain(|e| {
        if e.class != crate::notify::EXPIRED {
            return true;
        }
        let gone =
            written.contains(&e.key) || server.ks.expire_if_due(e.db, &e.key).unwrap_or(false);
        if gone {
            server.expired_keys.fetch_add(1, Ordering::Relaxed);
        }
        gone
    });
    crate::notify::publish(server, txn_flags(server), &events);
}

/// A blocking command's timeout argument: first for the `numkeys` forms
/// (`BLMPOP`, `BZMPOP`), last for the others.
fn timeout_of<'a>(name: &str, args: &'a [Bytes]) -> &'a [u8] {
    match name {
        "blmpop" | "bzmpop" => &args[1],
        _ => &args[args.len() - 1],
    }
}

/// A read command that makes more than one engine read (a collection's
/// record, then its elements; several keys): it reads at one snapshot, so
/// it sees no half of a concurrent write.
fn reads_many(name: &str, args: &[Bytes]) -> bool {
    match name {
        "get" | "strlen" | "getrange" | "substr" | "ttl" | "pttl" | "type" | "hlen" | "llen"
        | "scard" | "zcard" | "expiretime" | "pexpiretime" | "getbit" | "bitcount" | "bitpos" => {
            false
        }
        "mget" | "exists" => args.len() > 2,
        _ => true,
    }
}

fn admin(server: &Server, client: &mut Client, name: &str, args: &[Bytes], out: &mut Out) -> After {
    let r: CmdResult = match name {
        "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" | "publish" | "pubsub" => {
            crate::pubsub::run(server, client, name, args, out)
        }
        "ping" if !client.resp3 && (!client.channels.is_empty() || !client.patterns.is_empty()) => {
            if args.len() > 2 {
                out.error(&wrong_args("ping"));
            } else {
                out.array(2);
                out.bulk(b"pong");
                out.bulk(args.get(1).map_or(&b""[..], |a| &a[..]));
            }
            Ok(())
        }
        "ping" => {
            match args.len() {
                1 => out.simple("PONG"),
                2 => out.bulk(&args[1]),
                _ => {
                    out.error(&wrong_args("ping"));
                }
            }
            Ok(())
        }
        "echo" => {
            out.bulk(&args[1]);
            Ok(())
        }
        "quit" => {
            out.ok();
            return After::Close;
        }
        "monitor" => {
            if client.multi.is_some() {
                Err("ERR MONITOR isn't allowed for DENY BLOCKING client".to_owned())
            } else {
                // Already a monitor: no reply, as in redis-server.
                if !server.monitors.is(client.id) {
                    server.monitors.add(client.id, client.mailbox.sender());
                    out.ok();
                }
                Ok(())
            }
        }
        "reset" => {
            client.reset(server);
            out.simple("RESET");
            Ok(())
        }
        "swapdb" => swapdb(server, args, out),
        "select" => select_arg(server, &args[1]).map(|db| {
            client.select(db);
            out.ok();
        }),
        "auth" => auth(server, client, &args[1..], out),
        "hello" => hello(server, client, args, out),
        "client" => client_cmd(server, client, args, out),
        "command" => command(args, out),
        "multi" => {
            if client.multi.is_some() {
                Err("ERR MULTI calls can not be nested".to_owned())
            } else {
                client.multi = Some(Vec::new());
                client.multi_error = false;
                out.ok();
                Ok(())
            }
        }
        "discard" => {
            if client.multi.take().is_none() {
                Err("ERR DISCARD without MULTI".to_owned())
            } else {
                client.unwatch_all(server);
                out.ok();
                Ok(())
            }
        }
        "exec" => exec(server, client, out),
        "watch" => {
            if client.multi.is_some() {
                Err("ERR WATCH inside MULTI is not allowed".to_owned())
            } else if server.replica.get().is_some() {
                Err("ERR WATCH is not supported on a replicated shard".to_owned())
            } else {
                let now = now_ms();
                let mut r = Ok(());
                for k in &args[1..] {
                    if let Err(e) = client.watch(server, k, now) {
                        r = Err(data::engine(e));
                        break;
                    }
                }
                r.map(|()| out.ok())
            }
        }
        "unwatch" => {
            client.unwatch_all(server);
            out.ok();
            Ok(())
        }
        "role" => {
            role(server, out);
            Ok(())
        }
        "readonly" | "readwrite" => {
            client.readonly = name == "readonly";
            out.ok();
            Ok(())
        }
        "info" => {
            let text = server.info(&args[1..]);
            out.verbatim(&text);
            Ok(())
        }
        "config" => config(server, args, out),
        "debug" => debug(server, args, out),
        "save" => server.save().map(|()| out.ok()),
        "bgsave" => server
            .bgsave()
            .map(|()| out.simple("Background saving started")),
        "lastsave" => {
            out.int(server.last_save_unix.load(Ordering::Relaxed) as i64);
            Ok(())
        }
        // No scripting: there are never functions to flush or list.
        "function" => match &args[1].to_ascii_lowercase()[..] {
            b"flush" if args.len() <= 3 => {
                out.ok();
                Ok(())
            }
            b"list" => {
                out.array(0);
                Ok(())
            }
            _ => Err(subcommand_error("function", &args[1], &["flush", "list"])),
        },
        "time" => {
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            out.array(2);
            out.bulk(t.as_secs().to_string().as_bytes());
            out.bulk(t.subsec_micros().to_string().as_bytes());
            Ok(())
        }
        "wait" => int_arg(&args[1]).and_then(|replicas| {
            let timeout = int_arg(&args[2])?;
            if timeout < 0 {
                return Err("ERR timeout is negative".to_owned());
            }
            // No replicas: with some asked for, wait out the timeout (a
            // zero timeout would block forever in redis-server; here it
            // answers at once).
            if replicas > 0 && timeout > 0 {
                std::thread::sleep(Duration::from_millis(timeout as u64));
            }
            out.int(0);
            Ok(())
        }),
        "shutdown" => {
            for a in &args[1..] {
                let a = a.to_ascii_lowercase();
                if !matches!(&a[..], b"nosave" | b"save" | b"now" | b"force" | b"abort") {
                    out.error(SYNTAX);
                    return After::Continue;
                }
            }
            if args[1..].iter().any(|a| a.eq_ignore_ascii_case(b"abort")) {
                out.error("ERR No shutdown in progress.");
                return After::Continue;
            }
            return After::Shutdown;
        }
        _ => Err(format!("ERR unknown command '{name}'")),
    };
    if let Err(e) = r {
        out.error(&e);
    }
    After::Continue
}

fn auth(server: &Server, client: &mut Client, args: &[Bytes], out: &mut Out) -> CmdResult {
    let pass = server.config.read().requirepass.clone();
    let (user, given) = match args {
        [p] => {
            if pass.is_none() {
                return Err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".to_owned());
            }
            (&b"default"[..], &p[..])
        }
        [u, p] => (&u[..], &p[..]),
        _ => return Err(SYNTAX.to_owned()),
    };
    if check_password(pass.as_deref(), user, given) {
        client.authenticated = true;
        out.ok();
        Ok(())
    } else {
        Err("WRONGPASS invalid username-password pair or user is disabled.".to_owned())
    }
}

/// Only the `default` user exists; without `requirepass` it takes any
/// password (redis-server's `nopass`).
fn check_password(pass: Option<&str>, user: &[u8], given: &[u8]) -> bool {
    user == b"default" && pass.is_none_or(|p| constant_time_eq(p.as_bytes(), given))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, &x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`.
fn hello(server: &Server, client: &mut Client, args: &[Bytes], out: &mut Out) -> CmdResult {
    let mut proto = None;
    if args.len() > 1 {
        let v = data::parse_i64(&args[1])
            .ok_or("ERR Protocol version is not an integer or out of range")?;
        if !(2..=3).contains(&v) {
            return Err("NOPROTO unsupported protocol version".to_owned());
        }
        proto = Some(v);
    }
    let mut i = 2;
    let (mut auth_pair, mut setname) = (None, None);
    while i < args.len() {
        let opt = args[i].to_ascii_lowercase();
        match &opt[..] {
            b"auth" if i + 2 < args.len() => {
                auth_pair = Some((args[i + 1].clone(), args[i + 2].clone()));
                i += 3;
            }
            b"setname" if i + 1 < args.len() => {
                setname = Some(args[i + 1].clone());
                i += 2;
            }
            _ => {
                return Err(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[i])
                ));
            }
        }
    }
    if let Some((u, p)) = auth_pair {
        let pass = server.config.read().requirepass.clone();
        if !check_password(pass.as_deref(), &u, &p) {
            return Err("WRONGPASS invalid username-password pair or user is disabled.".to_owned());
        }
        client.authenticated = true;
    }
    if !client.authenticated {
        return Err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".to_owned());
    }
    if let Some(name) = setname {
        client.set_name(&name)?;
    }
    if let Some(v) = proto {
        out.resp3 = v == 3;
        client.resp3 = v == 3;
    }
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(crate::REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(if client.resp3 { 3 } else { 2 });
    out.bulk(b"id");
    out.int(client.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
    Ok(())
}

fn client_cmd(server: &Server, client: &mut Client, args: &[Bytes], out: &mut Out) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    let wrong = || {
        Err(subcommand_error(
            "client",
            &args[1],
            &[
                "setname", "getname", "id", "info", "list", "setinfo", "help", "kill", "no-evict",
                "unblock", "reply",
            ],
        ))
    };
    match (&sub[..], args.len()) {
        (b"setname", 3) => {
            client.set_name(&args[2])?;
            out.ok();
        }
        (b"getname", 2) => out.opt_bulk(client.name.as_deref()),
        (b"id", 2) => out.int(client.id as i64),
        (b"info", 2) => {
            client.query_bytes = multibulk_bytes(args);
            out.verbatim(&format!("{}\n", server.client_line(client)))
        }
        (b"list", _) => {
            client.query_bytes = multibulk_bytes(args);
            let text = server.client_list(client);
            out.verbatim(&text);
        }
        // Client libraries announce themselves (redis-py, go-redis).
        (b"setinfo", 4) => out.ok(),
        // Nothing is evicted here; clients send it at connect.
        (b"no-evict", 3) => match &args[2].to_ascii_lowercase()[..] {
            b"on" | b"off" => out.ok(),
            _ => return Err(SYNTAX.to_owned()),
        },
        (b"kill", n) if n >= 3 => client_kill(server, client, &args[2..], out)?,
        (b"reply", 3) => match &args[2].to_ascii_lowercase()[..] {
            b"on" => {
                client.reply_off = false;
                client.skip_this_reply = false;
                out.ok();
            }
            b"off" => client.reply_off = true,
            b"skip" => client.skip_next_reply = !client.reply_off,
            _ => return Err(SYNTAX.to_owned()),
        },
        (b"unblock", 3 | 4) => client_unblock(server, &args[2..], out)?,
        (b"help", 2) => {
            let lines = [
                "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GETNAME",
                "    Return the name of the current connection.",
                "ID",
                "    Return the ID of the current connection.",
                "INFO",
                "    Return information about the current client connection.",
                "LIST",
                "    Return information about client connections.",
                "SETNAME <name>",
                "    Assign the name <name> to the current connection.",
                "HELP",
                "    Print this help.",
            ];
            out.help(&lines);
        }
        _ => return wrong(),
    }
    Ok(())
}

/// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`: ends a client's blocking command
/// as if it timed out (a null reply) or with an `UNBLOCKED` error; 1 if
/// the client was blocked, else 0.
fn client_unblock(server: &Server, args: &[Bytes], out: &mut Out) -> CmdResult {
    let error = match args.get(1).map(|a| a.to_ascii_lowercase()) {
        None => false,
        Some(m) if m == b"timeout" => false,
        Some(m) if m == b"error" => true,
        Some(_) => {
            return Err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR".to_owned());
        }
    };
    let id = int_arg(&args[0])?;
    let target = server.clients.lock().get(&(id as u64)).cloned();
    let waiter = target.and_then(|c| c.parked.lock().clone());
    let unblocked = waiter.is_some_and(|w| {
        let mut st = w.state.lock();
        if *st != WaitState::Waiting {
            return false;
        }
        let mut reply = Out {
            resp3: w.resp3,
            ..Out::default()
        };
        if error {
            reply.error("UNBLOCKED client unblocked via CLIENT UNBLOCK");
        } else {
            reply.null_array();
        }
        *st = WaitState::Served;
        w.send(reply.buf);
        drop(st);
        server.blocking.remove(&w);
        true
    });
    out.int(i64::from(unblocked));
    Ok(())
}

/// The bytes of a command sent as a RESP array of bulk strings.
fn multibulk_bytes(args: &[Bytes]) -> usize {
    let header = |n: usize| n.to_string().len() + 3;
    header(args.len())
        + args
            .iter()
            .map(|a| header(a.len()) + a.len() + 2)
            .sum::<usize>()
}

/// One filter of `CLIENT KILL`.
type ClientFilter = Box<dyn Fn(&crate::server::ClientShared) -> bool>;

/// `CLIENT KILL addr` (replies OK) or `CLIENT KILL <filter value> ...`
/// with filters ID, ADDR, LADDR, USER, SKIPME, TYPE, MAXAGE (replies the
/// number killed). A killed client's connection closes after the command
/// it is running.
fn client_kill(server: &Server, me: &Client, args: &[Bytes], out: &mut Out) -> CmdResult {
    let clients: Vec<_> = server.clients.lock().values().cloned().collect();
    if let [addr] = args {
        let addr = String::from_utf8_lossy(addr);
        let Some(c) = clients.iter().find(|c| c.addr.to_string() == addr) else {
            return Err("ERR No such client".to_owned());
        };
        c.kill();
        out.ok();
        return Ok(());
    }
    if !args.len().is_multiple_of(2) {
        return Err(SYNTAX.to_owned());
    }
    let mut skipme = true;
    let mut tests: Vec<ClientFilter> = Vec::new();
    for pair in args.chunks(2) {
        let v = String::from_utf8_lossy(&pair[1]).into_owned();
        match &pair[0].to_ascii_lowercase()[..] {
            b"id" => {
                let id = v
                    .parse::<u64>()
                    .ok()
                    .filter(|&id| id > 0)
                    .ok_or("ERR client-id should be greater than 0")?;
                tests.push(Box::new(move |c| c.id == id));
            }
            b"addr" => tests.push(Box::new(move |c| c.addr.to_string() == v)),
            b"laddr" => tests.push(Box::new(move |c| c.laddr.to_string() == v)),
            b"user" => {
                if v != "default" {
                    return Err(format!("ERR No such user '{v}'"));
                }
            }
            b"type" => match v.to_ascii_lowercase().as_str() {
                "normal" => {}
                "master" | "replica" | "slave" | "pubsub" => tests.push(Box::new(|_| false)),
                _ => return Err(format!("ERR Unknown client type '{v}'")),
            },
            b"skipme" => match v.to_ascii_lowercase().as_str() {
                "yes" => skipme = true,
                "no" => skipme = false,
                _ => return Err(SYNTAX.to_owned()),
            },
            b"maxage" => {
                let age: u64 = v.parse().map_err(|_| SYNTAX.to_owned())?;
                tests.push(Box::new(move |c| c.created.elapsed().as_secs() >= age));
            }
            _ => return Err(SYNTAX.to_owned()),
        }
    }
    let mut n = 0;
    for c in &clients {
        if (skipme && c.id == me.id) || !tests.iter().all(|t| t(c)) {
            continue;
        }
        c.kill();
        n += 1;
    }
    out.int(n);
    Ok(())
}

/// `COMMAND`, `COMMAND COUNT|INFO|DOCS|LIST|GETKEYS`.
fn command(args: &[Bytes], out: &mut Out) -> CmdResult {
    let sub = args.get(1).map(|s| s.to_ascii_lowercase());
    match sub.as_deref() {
        None => {
            out.array(COMMANDS.len());
            for s in COMMANDS {
                command_info(s, out);
            }
        }
        Some(b"count") if args.len() == 2 => out.int(COMMANDS.len() as i64),
        Some(b"list") => {
            let names = COMMANDS
                .iter()
                .map(|s| s.name)
                .chain(SUBCOMMANDS.iter().copied());
            let picked: Vec<&str> = match &args[2..] {
                [] => names.collect(),
                [f, kind, value] if f.eq_ignore_ascii_case(b"filterby") => {
                    match &kind.to_ascii_lowercase()[..] {
                        b"pattern" => names
                            .filter(|n| glob::matches(value, n.as_bytes(), true))
                            .collect(),
                        // No modules, and no ACL categories are kept.
                        b"module" | b"aclcat" => Vec::new(),
                        _ => return Err(SYNTAX.to_owned()),
                    }
                }
                _ => return Err(SYNTAX.to_owned()),
            };
            out.array(picked.len());
            for n in picked {
                out.bulk(n.as_bytes());
            }
        }
        Some(b"getkeys") if args.len() >= 4 => {
            let name = String::from_utf8_lossy(&args[2]).to_ascii_lowercase();
            let Some(spec) = lookup(&name) else {
                return Err("ERR Invalid command specified".to_owned());
            };
            let cmd_args = &args[2..];
            if !arity_ok(spec, cmd_args.len()) {
                return Err("ERR Invalid number of arguments specified for command".to_owned());
            }
            let keys = keys_of(spec, cmd_args);
            if keys.is_empty() {
                return Err("ERR The command has no key arguments".to_owned());
            }
            out.array(keys.len());
            for k in keys {
                out.bulk(k);
            }
        }
        Some(b"info") => {
            out.array(args.len() - 2);
            for a in &args[2..] {
                match lookup(&String::from_utf8_lossy(a).to_ascii_lowercase()) {
                    Some(s) => command_info(s, out),
                    None => out.null_array(),
                }
            }
        }
        // Documentation is not kept: an empty map (redis-cli then gives no
        // hints, which it handles).
        Some(b"docs") => out.map(0),
        _ => {
            return Err(subcommand_error(
                "command",
                &args[1],
                &["count", "list", "info", "docs", "getkeys"],
            ))
        }
    }
    Ok(())
}

fn command_info(s: &Spec, out: &mut Out) {
    out.array(10);
    out.bulk(s.name.as_bytes());
    out.int(i64::from(s.arity));
    out.set(s.flags.len());
    for f in s.flags {
        out.simple(f);
    }
    out.int(i64::from(s.first_key));
    out.int(i64::from(s.last_key));
    out.int(i64::from(s.step));
    out.set(0); // ACL categories
    out.set(0); // tips
    out.array(0); // key specs
    out.array(0); // subcommands
}

fn exec(server: &Server, client: &mut Client, out: &mut Out) -> CmdResult {
    let Some(queued) = client.multi.take() else {
        return Err("ERR EXEC without MULTI".to_owned());
    };
    // The watches end with this EXEC whatever happens; they are dropped
    // once the stripe locks are released (dropping takes a stripe lock).
    let watched = std::mem::take(&mut client.watched);
    let r = if client.multi_error {
        client.multi_error = false;
        Err("EXECABORT Transaction discarded because of previous errors.".to_owned())
    } else {
        exec_locked(server, client, &queued, &watched, out)
    };
    for w in &watched {
        server.ks.unwatch(w.db, &w.key);
    }
    r
}

/// Runs a transaction under its locks: the whole keyspace when a command
/// empties or reads all of it, else the stripes of every key of every
/// command and of the watched keys.
fn exec_locked(
    server: &Server,
    client: &mut Client,
    queued: &[Vec<Bytes>],
    watched: &[crate::server::Watched],
    out: &mut Out,
) -> CmdResult {
    let ks = &server.ks;
    let specs: Vec<&Spec> = queued
        .iter()
        .filter_map(|a| lookup(&String::from_utf8_lossy(&a[0]).to_ascii_lowercase()))
        .collect();
    if specs.len() != queued.len() {
        return Err("ERR a queued command is unknown".to_owned());
    }
    // `SWAPDB` changes what every database number names.
    let global =
        (specs.iter()).any(|s| matches!(s.kind, Kind::Flush | Kind::ReadAll) || s.name == "swapdb");
    let mut held = if global {
        ks.lock_all()
    } else {
        let mut keys: Vec<&[u8]> = Vec::new();
        for (s, a) in specs.iter().zip(queued) {
            keys.extend(keys_of(s, a));
        }
        keys.extend(watched.iter().map(|w| &w.key[..]));
        ks.lock_keys(&keys)
    };
    let now = now_ms();
    let touched = watched.iter().any(|w| {
        ks.watched_version(&held, w.db, &w.key) != Some(w.version)
            || w.expire_at_ms.is_some_and(|at| at <= now)
    });
    if touched {
        out.null_array();
        return Ok(());
    }
    let ctx = ctx(server);
    let mut txn = Txn::new(ks);
    txn.db = client.db;
    txn.in_multi = true;
    txn.notify = txn_flags(server);
    let start = out.buf.len();
    let mut swapped = Vec::new();
    out.array(queued.len());
    for (s, a) in specs.iter().zip(queued) {
        let at = out.buf.len();
        let mark = txn.events_len();
        txn.misses = misses_of(s, a, txn.notify);
        let r = match s.kind {
            // The commands after it run in the database it selects, in
            // the same transaction; the connection stays there.
            Kind::Admin if s.name == "select" => select_arg(server, &a[1]).map(|db| {
                txn.select(db);
                client.select(db);
                out.ok();
            }),
            // In the transaction's batch, under the keyspace held alone.
            Kind::Admin if s.name == "swapdb" => swapdb_args(server, a).and_then(|(x, y)| {
                txn.swap_databases(x, y).map_err(data::engine)?;
                swapped.extend([x, y]);
                out.ok();
                Ok(())
            }),
            Kind::Admin => {
                // Connection and server commands queued in a transaction
                // run as they would alone.
                admin(server, client, s.name, a, out);
                Ok(())
            }
            _ => data::run(s.name, a, &mut txn, &ctx, out),
        };
        if let Err(e) = r {
            out.buf.truncate(at);
            out.error(&e);
            txn.truncate_events(mark);
        }
        if server.monitors.active() {
            server
                .monitors
                .feed(s.name, &client.shared.addr.to_string(), a);
        }
    }
    let events = txn.take_events();
    let mut written = Vec::new();
    let mut written_by_db = Vec::new();
    if txn.has_writes() {
        written_by_db = txn.written_by_db();
        written = written_by_db.iter().flat_map(|(_, k)| k.clone()).collect();
        if let Err(e) = txn.commit(&mut held) {
            // Nothing of the batch was applied: the reply is the error.
            out.buf.truncate(start);
            return Err(data::engine(e));
        }
    }
    drop(held);
    publish_committed(server, &written, events);
    if server.blocking.any() && !written.is_empty() {
        for (db, keys) in written_by_db {
            serve_blocked(server, db, keys);
        }
    }
    if server.blocking.any() {
        swapped.sort_unstable();
        swapped.dedup();
        for db in swapped {
            serve_blocked(server, db, server.blocking.keys_in(db));
        }
    }
    Ok(())
}

/// The database `SELECT` names in `arg`, or its error.
fn select_arg(server: &Server, arg: &[u8]) -> Result<u8, String> {
    let db = int_arg(arg)?;
    if !(0..i64::from(crate::store::DATABASES)).contains(&db) {
        Err("ERR DB index is out of range".to_owned())
    } else if db != 0 && server.replica.get().is_some() {
        // Its log's entries carry no database: they apply in 0.
        Err(
            "ERR SELECT of a database other than 0 is not supported on a replicated shard"
                .to_owned(),
        )
    } else {
        Ok(db as u8)
    }
}

const SWAPDB_REPLICATED: &str = "ERR SWAPDB is not supported on a replicated shard";

/// The two databases `SWAPDB` names, or its error as redis-server words
/// it.
fn swapdb_args(server: &Server, args: &[Bytes]) -> Result<(u8, u8), String> {
    // redis-server's `getIntFromObjectOrReply`: an integer that fits an
    // `int`, else its own message for each argument.
    let index = |a: &Bytes, which: &str| {
        int_arg(a)
            .ok()
            .filter(|&v| i32::try_from(v).is_ok())
            .ok_or_else(|| format!("ERR invalid {which} DB index"))
    };
    let (a, b) = (index(&args[1], "first")?, index(&args[2], "second")?);
    let range = 0..i64::from(crate::store::DATABASES);
    if !range.contains(&a) || !range.contains(&b) {
        return Err("ERR DB index is out of range".to_owned());
    }
    if server.replica.get().is_some() {
        return Err(SWAPDB_REPLICATED.to_owned());
    }
    Ok((a as u8, b as u8))
}

/// `SWAPDB a b`: the two databases trade contents for every client at
/// once ([`crate::store::Keyspace::swap_databases`]: one write of the
/// database map, no key copied), with the keyspace held exclusively;
/// then the clients blocked on a key of either are served if it now
/// holds something to pop. Refused on a replicated shard, whose log's
/// entries carry no database (as `SELECT` beyond 0 is).
fn swapdb(server: &Server, args: &[Bytes], out: &mut Out) -> CmdResult {
    let (a, b) = swapdb_args(server, args)?;
    let mut held = server.ks.lock_all();
    server
        .ks
        .swap_databases(&mut held, a, b)
        .map_err(data::engine)?;
    drop(held);
    if a != b && server.blocking.any() {
        for db in [a, b] {
            serve_blocked(server, db, server.blocking.keys_in(db));
        }
    }
    out.ok();
    Ok(())
}

/// `DEBUG`: of redis-server's subcommands only `SET-ACTIVE-EXPIRE 0|1`
/// (the reaper off or on; reads still treat expired keys as absent),
/// which Redis's own tests use to see lazy expiry alone.
fn debug(server: &Server, args: &[Bytes], out: &mut Out) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    match (&sub[..], args.len()) {
        (b"set-active-expire", 3) => {
            let on = int_arg(&args[2])? != 0;
            *server.active_expire.lock() = on;
            out.ok();
            Ok(())
        }
        _ => Err(format!(
            "ERR Unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

/// `ROLE` as redis-server answers it: a shard's leader is a master
/// listing its followers, a follower a slave naming the leader; a server
/// of its own is a master without replicas.
fn role(server: &Server, out: &mut Out) {
    let Some(r) = server.replica.get() else {
        out.array(3);
        out.bulk(b"master");
        out.int(0);
        out.array(0);
        return;
    };
    let st = r.status();
    if st.state == openraft::ServerState::Leader {
        let others: Vec<_> = st.members.iter().filter(|(id, _)| **id != st.id).collect();
        out.array(3);
        out.bulk(b"master");
        out.int(st.applied_index as i64);
        out.array(others.len());
        for (id, (m, _)) in others {
            let (h, p) = crate::raft::host_port(&m.redis_addr);
            out.array(3);
            out.bulk(h.as_bytes());
            out.bulk(p.to_string().as_bytes());
            let off = st.matched.get(id).copied().unwrap_or(0);
            out.bulk(off.to_string().as_bytes());
        }
    } else {
        let leader = r.leader_redis_addr();
        let (h, p) = leader
            .as_deref()
            .map(crate::raft::host_port)
            .unwrap_or_default();
        out.array(5);
        out.bulk(b"slave");
        out.bulk(h.as_bytes());
        out.int(i64::from(p));
        out.bulk(if leader.is_some() {
            b"connected"
        } else {
            b"connect"
        });
        out.int(st.applied_index as i64);
    }
}

/// How a replicated shard runs a command from a client.
#[derive(Debug)]
pub enum Route {
    /// Here, as a server of its own would (connection and server
    /// commands, queueing inside `MULTI`).
    Local,
    /// Reads: here, once a read barrier confirmed this node leads.
    Read,
    /// Reads after `READONLY`: here, from whatever this node applied, but
    /// never while a snapshot replaces its keyspace.
    StaleRead,
    /// Through the log: the command, or the `EXEC`'s queue.
    Write(crate::raft::Request),
}

/// Where `args` from `client` runs on a replicated shard. Takes the
/// queue of an `EXEC` it sends through the log.
pub fn route(client: &mut Client, args: &[Bytes]) -> Route {
    let Some(first) = args.first() else {
        return Route::Local;
    };
    let name = String::from_utf8_lossy(first).to_ascii_lowercase();
    let Some(spec) = lookup(&name) else {
        return Route::Local;
    };
    let subscribed = !client.channels.is_empty() || !client.patterns.is_empty();
    if !client.authenticated || !arity_ok(spec, args.len()) || (subscribed && !client.resp3) {
        return Route::Local;
    }
    let now_ms = now_ms();
    if client.multi.is_some() {
        if name != "exec" || client.multi_error {
            return Route::Local;
        }
        let queued = client.multi.take().unwrap_or_default();
        return Route::Write(crate::raft::Request {
            now_ms,
            resp3: client.resp3,
            multi: true,
            cmds: queued,
        });
    }
    match spec.kind {
        Kind::Write | Kind::Flush => Route::Write(crate::raft::Request {
            now_ms,
            resp3: client.resp3,
            multi: false,
            cmds: vec![args.to_vec()],
        }),
        Kind::Read | Kind::ReadAll if client.readonly => Route::StaleRead,
        Kind::Read | Kind::ReadAll => Route::Read,
        _ => Route::Local,
    }
}

/// The name of the command a replicated shard's leader proposes for the
/// keys its reaper finds due: `REAP_EXPIRED at key [at key ...]`, each
/// `at` a time index entry's expiry (decimal ms). No client can send it:
/// the leading zero byte names no command, so a client's copy is an
/// unknown command and never enters the log.
pub const REAP_EXPIRED: &[u8] = b"\0reap-expired";

/// The (`at`, key) pairs of a [`REAP_EXPIRED`] request, if `req` is one
/// (one command, not an `EXEC`); malformed pairs are left out.
fn reap_pairs(
    req: &crate::raft::Request,
    cmds: &[(Option<&'static Spec>, Vec<Bytes>)],
) -> Option<Vec<(u64, Bytes)>> {
    let [(None, a)] = cmds else {
        return None;
    };
    if req.multi || a.first().map(|n| &n[..]) != Some(REAP_EXPIRED) {
        return None;
    }
    Some(
        a[1..]
            .chunks_exact(2)
            .filter_map(|p| {
                let at = std::str::from_utf8(&p[0]).ok()?.parse().ok()?;
                Some((at, p[1].clone()))
            })
            .collect(),
    )
}

/// Applies one replicated entry: the commands of its requests (each one
/// command, or an `EXEC`'s queue) run in order in one transaction under
/// all their locks, each request at its leader's clock, and commit as one
/// batch with `mark` (the applied record), written even when they write
/// nothing. Later requests see the earlier ones' writes, as if run one
/// after another. Blocking pops do not block (as inside `EXEC`), and
/// connection or server commands are refused inside a replicated `EXEC`.
/// Returns each request's reply; an error means the engine refused the
/// batch, and the node must not apply further.
pub fn apply_entry(
    server: &Server,
    mut reqs: Vec<crate::raft::Request>,
    mark: (Vec<u8>, Vec<u8>),
    seed: u64,
) -> sluicedb::Result<Vec<Vec<u8>>> {
    let ks = &server.ks;
    type Cmd = (Option<&'static Spec>, Vec<Bytes>);
    let parsed: Vec<Vec<Cmd>> = reqs
        .iter_mut()
        .map(|r| {
            std::mem::take(&mut r.cmds)
                .into_iter()
                .map(|a| {
                    let s = a
                        .first()
                        .and_then(|n| lookup(&String::from_utf8_lossy(n).to_ascii_lowercase()));
                    (s, a)
                })
                .collect()
        })
        .collect();
    let reaps: Vec<Option<Vec<(u64, Bytes)>>> = reqs
        .iter()
        .zip(&parsed)
        .map(|(r, cmds)| reap_pairs(r, cmds))
        .collect();
    let all = || parsed.iter().flatten();
    let global =
        all().any(|(s, _)| s.is_some_and(|s| matches!(s.kind, Kind::Flush | Kind::ReadAll)));
    let mut held = if global {
        ks.lock_all()
    } else {
        let mut keys: Vec<&[u8]> = Vec::new();
        for (s, a) in all() {
            if let Some(s) = s.filter(|s| arity_ok(s, a.len())) {
                keys.extend(keys_of(s, a));
            }
        }
        keys.extend(reaps.iter().flatten().flatten().map(|(_, k)| &k[..]));
        ks.lock_keys(&keys)
    };
    let ctx = ctx(server);
    let mut txn = Txn::new(ks);
    txn.one_db = true;
    txn.in_multi = true;
    txn.mark = Some(mark);
    let mut replies = Vec::with_capacity(reqs.len());
    let mut reaped_keys = 0u64;
    for (j, ((req, cmds), reap)) in reqs.iter().zip(&parsed).zip(&reaps).enumerate() {
        txn.now = req.now_ms;
        txn.seed = Some(seed.wrapping_mul(1 << 16).wrapping_add(j as u64));
        let mut out = Out {
            resp3: req.resp3,
            ..Out::default()
        };
        if let Some(pairs) = reap {
            let mut reaped = 0;
            for (at, key) in pairs {
                reaped += i64::from(txn.reap(*at, key)?);
            }
            reaped_keys += reaped as u64;
            out.int(reaped);
            replies.push(out.buf);
            continue;
        }
        if req.multi {
            out.array(cmds.len());
        }
        for (s, a) in cmds {
            let at = out.buf.len();
            let r = match s {
                _ if a.is_empty() => Err("ERR empty command".to_owned()),
                None => Err(unknown_command(a)),
                Some(s) if !arity_ok(s, a.len()) => Err(wrong_args(s.name)),
                Some(s) if s.kind == Kind::Admin => Err(format!(
                    "ERR {} is not run inside a transaction on a replicated shard",
                    s.name
                )),
                Some(s) => data::run(s.name, a, &mut txn, &ctx, &mut out),
            };
            if let Err(e) = r {
                out.buf.truncate(at);
                out.error(&e);
            }
        }
        replies.push(out.buf);
    }
    txn.commit(&mut held)?;
    server
        .expired_keys
        .fetch_add(reaped_keys, Ordering::Relaxed);
    Ok(replies)
}

/// Parameters `CONFIG GET` reports and `CONFIG SET` changes.
fn config(server: &Server, args: &[Bytes], out: &mut Out) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    match &sub[..] {
        b"get" if args.len() >= 3 => {
            let all = server.config_pairs();
            let mut hits: Vec<(String, String)> = Vec::new();
            for (k, v) in &all {
                if args[2..]
                    .iter()
                    .any(|p| glob::matches(p, k.as_bytes(), true))
                {
                    hits.push((k.clone(), v.clone()));
                }
            }
            out.map(hits.len());
            for (k, v) in hits {
                out.bulk(k.as_bytes());
                out.bulk(v.as_bytes());
            }
            Ok(())
        }
        b"set" if args.len() >= 4 && args.len().is_multiple_of(2) => {
            let pairs: Vec<(String, String)> = args[2..]
                .chunks(2)
                .map(|p| {
                    (
                        String::from_utf8_lossy(&p[0]).to_ascii_lowercase(),
                        String::from_utf8_lossy(&p[1]).into_owned(),
                    )
                })
                .collect();
            server.config_set(&pairs)?;
            out.ok();
            Ok(())
        }
        b"resetstat" if args.len() == 2 => {
            server.reset_stats();
            out.ok();
            Ok(())
        }
        b"rewrite" if args.len() == 2 => {
            server.config_rewrite()?;
            out.ok();
            Ok(())
        }
        _ => Err(subcommand_error(
            "config",
            &args[1],
            &["get", "set", "resetstat", "rewrite"],
        )),
    }
}

/// Parses an `appendfsync` value.
pub fn parse_fsync(s: &str) -> Option<Fsync> {
    match s.to_ascii_lowercase().as_str() {
        "always" => Some(Fsync::Always),
        "everysec" => Some(Fsync::EverySec),
        "no" => Some(Fsync::No),
        _ => None,
    }
}

/// Client ids, from 1 as in redis-server.
pub static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);
