//! The string and key commands, run in a [`Txn`] with redis-server's
//! replies and error strings. Each validates its arguments before it
//! stages a write, so a command that fails changes nothing (inside `EXEC`,
//! as in redis-server, the others still run).

use bytes::Bytes;

use crate::glob;
use crate::notify as ev;
use crate::resp::Out;
use crate::store::{Entry, Rec, Txn};

/// A command's failure: the error line to reply with.
pub type CmdResult = Result<(), String>;

pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// An engine error as a reply.
pub fn engine(e: sluicedb::Error) -> String {
    format!("ERR sluicedb: {e}")
}

/// An integer as redis-server's `string2ll` reads it: optional `-`, no
/// `+`, no spaces, no leading zeros, within i64.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    if digits.is_empty()
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits[0] == b'0' && b.len() > 1)
    {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

pub fn int_arg(b: &[u8]) -> Result<i64, String> {
    parse_i64(b).ok_or_else(|| NOT_INTEGER.to_owned())
}

/// A float as redis-server's `string2ld` reads it (no spaces, not NaN).
pub fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// A float as `INCRBYFLOAT` stores it: the shortest text that reads back
/// as the same f64, with no exponent. (redis-server computes in `long
/// double` and prints 17 decimals; results differ in the last digits, e.g.
/// 0.1 + 0.2 gives `0.30000000000000004` here and `0.3` there.)
pub fn format_float(v: f64) -> String {
    let s = format!("{v}");
    if s == "-0" {
        "0".to_owned()
    } else {
        s
    }
}

fn lower(b: &[u8]) -> Vec<u8> {
    b.to_ascii_lowercase()
}

/// The settings data commands read: the longest string `APPEND` and
/// `SETRANGE` may make (redis-server's `proto-max-bulk-len` check).
pub struct Ctx {
    pub max_bulk_bytes: usize,
}

/// An expiry argument turned into an absolute time in ms; `unit_ms` 1000
/// for seconds; `absolute` for `EXAT`/`PXAT`. Errors like redis-server.
fn expire_at(arg: &[u8], unit_ms: i64, absolute: bool, now: u64, cmd: &str) -> Result<i64, String> {
    let v = int_arg(arg)?;
    let invalid = || format!("ERR invalid expire time in '{cmd}' command");
    if v <= 0 {
        return Err(invalid());
    }
    let ms = v.checked_mul(unit_ms).ok_or_else(invalid)?;
    if absolute {
        Ok(ms)
    } else {
        ms.checked_add(now as i64).ok_or_else(invalid)
    }
}

/// Runs one data command (`name` lowercased) against `txn`.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, ctx: &Ctx, out: &mut Out) -> CmdResult {
    let e = engine;
    match name {
        "get" => {
            let v = txn.get(&args[1])?;
            out.opt_bulk(v.as_ref().map(|v| &v.value[..]));
        }
        "set" => set(args, txn, out)?,
        "setnx" => {
            if txn.exists(&args[1])? {
                out.int(0);
            } else {
                txn.set(&args[1], Entry::plain(args[2].clone()));
                txn.notify(ev::STRING, "set", &args[1]);
                out.int(1);
            }
        }
        "setex" | "psetex" => {
            let unit = if name == "setex" { 1000 } else { 1 };
            let at = expire_at(&args[2], unit, false, txn.now, name)?;
            put_expiring(txn, &args[1], args[3].clone(), at);
            txn.notify(ev::STRING, "set", &args[1]);
            if at as u64 > txn.now {
                txn.notify(ev::GENERIC, "expire", &args[1]);
            }
            out.ok();
        }
        "getset" => {
            let old = txn.get(&args[1])?;
            txn.set(&args[1], Entry::plain(args[2].clone()));
            txn.notify(ev::STRING, "set", &args[1]);
            out.opt_bulk(old.as_ref().map(|v| &v.value[..]));
        }
        "getdel" => {
            let old = txn.get(&args[1])?;
            if old.is_some() {
                txn.delete(&args[1]);
                txn.notify(ev::GENERIC, "del", &args[1]);
            }
            out.opt_bulk(old.as_ref().map(|v| &v.value[..]));
        }
        "getex" => getex(args, txn, out)?,
        "mget" => {
            out.array(args.len() - 1);
            let keys: Vec<&[u8]> = args[1..].iter().map(|k| &k[..]).collect();
            for r in txn.recs(&keys).map_err(e)? {
                // Another type reads as nil here, not as an error.
                match r {
                    Some(Rec::Str(v)) => out.bulk(&v.value),
                    _ => out.null(),
                }
            }
        }
        "mset" | "msetnx" => {
            if args.len().is_multiple_of(2) {
                return Err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ));
            }
            if name == "msetnx" {
                for pair in args[1..].chunks(2) {
                    if txn.exists(&pair[0])? {
                        out.int(0);
                        return Ok(());
                    }
                }
            }
            for pair in args[1..].chunks(2) {
                txn.set(&pair[0], Entry::plain(pair[1].clone()));
                txn.notify(ev::STRING, "set", &pair[0]);
            }
            if name == "mset" {
                out.ok();
            } else {
                out.int(1);
            }
        }
        "append" => {
            let mut cur = txn.get(&args[1])?.unwrap_or(Entry::plain(Vec::new()));
            if cur.value.len() + args[2].len() > ctx.max_bulk_bytes {
                return Err(TOO_BIG.to_owned());
            }
            let mut value = Vec::with_capacity(cur.value.len() + args[2].len());
            value.extend_from_slice(&cur.value);
            value.extend_from_slice(&args[2]);
            cur.value = value.into();
            let n = cur.value.len();
            txn.set(&args[1], cur);
            txn.notify(ev::STRING, "append", &args[1]);
            out.int(n as i64);
        }
        "strlen" => {
            let v = txn.get(&args[1])?;
            out.int(v.map_or(0, |v| v.value.len() as i64));
        }
        "getrange" | "substr" => getrange(args, txn, out)?,
        "setrange" => setrange(args, txn, ctx, out)?,
        "incr" | "decr" | "incrby" | "decrby" => {
            let by = match name {
                "incr" => 1,
                "decr" => -1,
                "incrby" => int_arg(&args[2])?,
                _ => int_arg(&args[2])?
                    .checked_neg()
                    .ok_or("ERR decrement would overflow")?,
            };
            incr(txn, &args[1], by, out)?;
        }
        "incrbyfloat" => {
            let by = parse_float(&args[2]).ok_or(NOT_FLOAT)?;
            let mut cur = txn
                .get(&args[1])?
                .unwrap_or(Entry::plain(Bytes::from_static(b"0")));
            let v = parse_float(&cur.value).ok_or(NOT_FLOAT)?;
            let sum = v + by;
            if !sum.is_finite() {
                return Err("ERR increment would produce NaN or Infinity".to_owned());
            }
            let text = format_float(sum);
            cur.value = text.clone().into_bytes().into();
            txn.set(&args[1], cur);
            txn.notify(ev::STRING, "incrbyfloat", &args[1]);
            out.bulk(text.as_bytes());
        }
        "del" | "unlink" => {
            let mut n = 0;
            for k in &args[1..] {
                if txn.exists(k)? {
                    txn.delete(k);
                    txn.notify(ev::GENERIC, "del", k);
                    n += 1;
                }
            }
            out.int(n);
        }
        "exists" => {
            let mut n = 0;
            for k in &args[1..] {
                n += i64::from(txn.exists(k)?);
            }
            out.int(n);
        }
        "type" => {
            let r = txn.rec(&args[1]).map_err(e)?;
            out.simple(r.as_ref().map_or("none", Rec::type_name));
        }
        "rename" | "renamenx" => {
            let Some(v) = txn.rec(&args[1]).map_err(e)? else {
                return Err("ERR no such key".to_owned());
            };
            if args[1] == args[2] {
                if name == "rename" {
                    out.ok();
                } else {
                    out.int(0);
                }
                return Ok(());
            }
            if name == "renamenx" && txn.exists(&args[2])? {
                out.int(0);
                return Ok(());
            }
            // A collection moves whole: its elements are keyed by its
            // version, not its name.
            txn.delete(&args[1]);
            txn.put(&args[2], v);
            txn.notify(ev::GENERIC, "rename_from", &args[1]);
            txn.notify(ev::GENERIC, "rename_to", &args[2]);
            if name == "rename" {
                out.ok();
            } else {
                out.int(1);
            }
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(name, args, txn, out)?,
        "ttl" | "pttl" => {
            let v = txn.rec(&args[1]).map_err(e)?;
            let r = match v.map(|v| v.expire_at_ms()) {
                None => -2,
                Some(None) => -1,
                Some(Some(at)) => {
                    let left = at.saturating_sub(txn.now) as i64;
                    if name == "ttl" {
                        (left + 500) / 1000
                    } else {
                        left
                    }
                }
            };
            out.int(r);
        }
        "persist" => match txn.rec(&args[1]).map_err(e)? {
            Some(mut v) if v.expire_at_ms().is_some() => {
                v.set_expire_at_ms(None);
                txn.put(&args[1], v);
                txn.notify(ev::GENERIC, "persist", &args[1]);
                out.int(1);
            }
            _ => out.int(0),
        },
        "flushdb" | "flushall" => {
            if args.len() > 2
                || (args.len() == 2 && !matches!(&lower(&args[1])[..], b"async" | b"sync"))
            {
                return Err(SYNTAX.to_owned());
            }
            txn.flush(name == "flushall").map_err(e)?;
            out.ok();
        }
        "dbsize" => {
            let mut n = 0;
            txn.keyspace()
                .scan_from(txn.db, 0, txn.now, |_, _, _| {
                    n += 1;
                    true
                })
                .map_err(e)?;
            out.int(n);
        }
        "keys" => {
            // redis-server's KEYS (7.0) skips expired keys without
            // expiring them: no `expired` event.
            let mut keys = Vec::new();
            txn.keyspace()
                .scan_from(txn.db, 0, txn.now, |_, k, _| {
                    if glob::matches(&args[1], k, false) {
                        keys.push(k.to_vec());
                    }
                    true
                })
                .map_err(e)?;
            out.array(keys.len());
            for k in keys {
                out.bulk(&k);
            }
        }
        "scan" => scan(args, txn, out)?,
        "randomkey" => {
            // Every expired key passed over on the way is expired, as
            // redis-server's RANDOMKEY expires those it draws.
            let (start, now): (u64, u64) = (rand::random(), txn.now);
            let (mut found, mut expired) = (None, Vec::new());
            let ks = txn.keyspace();
            for from in [start, 0] {
                ks.scan_seeing_expired(
                    txn.db,
                    from,
                    now,
                    |_, k, _| {
                        found = Some(k.to_vec());
                        false
                    },
                    |k| expired.push(k.to_vec()),
                )
                .map_err(e)?;
                if found.is_some() {
                    break;
                }
            }
            for k in expired {
                txn.note_expired(&k);
            }
            out.opt_bulk(found.as_deref());
        }
        _ => {
            return crate::hash::run(name, args, txn, out)
                .or_else(|| crate::list::run(name, args, txn, out))
                .or_else(|| crate::set::run(name, args, txn, out))
                .or_else(|| crate::zset::run(name, args, txn, out))
                .or_else(|| crate::keys::run(name, args, txn, out))
                .or_else(|| crate::bits::run(name, args, txn, out))
                .or_else(|| crate::lcs::run(name, args, txn, ctx, out))
                .or_else(|| crate::sort::run(name, args, txn, out))
                .or_else(|| crate::dump::run(name, args, txn, out))
                .unwrap_or_else(|| Err(format!("ERR unknown command '{name}'")))
        }
    }
    Ok(())
}

fn put_expiring(txn: &mut Txn<'_>, key: &[u8], value: Bytes, at_ms: i64) {
    if at_ms as u64 <= txn.now {
        // Already past: the key is gone at once (redis-server deletes it).
        txn.delete(key);
    } else {
        txn.set(
            key,
            Entry {
                value,
                expire_at_ms: Some(at_ms as u64),
            },
        );
    }
}

/// An expiry option (`EX`, `PX`, `EXAT`, `PXAT`, lowercased) with its
/// argument: (argument, ms per unit, absolute).
fn expiry_option<'a>(opt: &[u8], next: Option<&'a Bytes>) -> Option<(&'a [u8], i64, bool)> {
    let unit = match opt {
        b"ex" | b"exat" => 1000,
        b"px" | b"pxat" => 1,
        _ => return None,
    };
    next.map(|arg| (&arg[..], unit, opt.len() == 4))
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
fn set(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expire: Option<(&[u8], i64, bool)> = None;
    let mut i = 3;
    while i < args.len() {
        let opt = lower(&args[i]);
        let next = args.get(i + 1);
        match &opt[..] {
            b"nx" if !xx => nx = true,
            b"xx" if !nx => xx = true,
            b"get" => get = true,
            b"keepttl" if expire.is_none() => keepttl = true,
            _ if expire.is_none() && !keepttl && expiry_option(&opt, next).is_some() => {
                expire = expiry_option(&opt, next);
                i += 1;
            }
            _ => return Err(SYNTAX.to_owned()),
        }
        i += 1;
    }
    let at = match expire {
        Some((arg, unit, abs)) => Some(expire_at(arg, unit, abs, txn.now, "set")?),
        None => None,
    };
    // A plain SET replaces whatever was there without looking: reading
    // the old value would cost a value-store read per write for the
    // separated presets. (A stale expiry index entry of the old value is
    // dropped by the reaper, which checks the record before deleting.)
    let old = if nx || xx || get || keepttl {
        let old = txn.rec(&args[1]).map_err(engine)?;
        if get && matches!(old, Some(Rec::Coll(_))) {
            return Err(crate::store::WRONGTYPE.to_owned());
        }
        old
    } else {
        None
    };
    let blocked = (nx && old.is_some()) || (xx && old.is_none());
    if !blocked {
        let value = args[2].clone();
        match at {
            Some(at) => put_expiring(txn, &args[1], value, at),
            None => {
                let expire_at_ms = if keepttl {
                    old.as_ref().and_then(Rec::expire_at_ms)
                } else {
                    None
                };
                txn.set(
                    &args[1],
                    Entry {
                        value,
                        expire_at_ms,
                    },
                );
            }
        }
    }
    if !blocked {
        txn.notify(ev::STRING, "set", &args[1]);
        if at.is_some_and(|at| at as u64 > txn.now) {
            txn.notify(ev::GENERIC, "expire", &args[1]);
        }
    }
    if get {
        match &old {
            Some(Rec::Str(v)) => out.bulk(&v.value),
            _ => out.null(),
        }
    } else if blocked {
        out.null();
    } else {
        out.ok();
    }
    Ok(())
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`.
fn getex(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    enum Change<'a> {
        Keep,
        Persist,
        At(&'a [u8], i64, bool),
    }
    let mut change = Change::Keep;
    let mut i = 2;
    while i < args.len() {
        let opt = lower(&args[i]);
        let next = args.get(i + 1);
        match (&opt[..], &change) {
            (b"persist", Change::Keep) => change = Change::Persist,
            (_, Change::Keep) if expiry_option(&opt, next).is_some() => {
                if let Some((arg, unit, abs)) = expiry_option(&opt, next) {
                    change = Change::At(arg, unit, abs);
                }
                i += 1;
            }
            _ => return Err(SYNTAX.to_owned()),
        }
        i += 1;
    }
    let at = match change {
        Change::At(arg, unit, abs) => Some(expire_at(arg, unit, abs, txn.now, "getex")?),
        _ => None,
    };
    let Some(mut v) = txn.get(&args[1])? else {
        out.null();
        return Ok(());
    };
    out.bulk(&v.value);
    match (change, at) {
        (Change::Persist, _) if v.expire_at_ms.is_some() => {
            v.expire_at_ms = None;
            txn.set(&args[1], v);
            txn.notify(ev::GENERIC, "persist", &args[1]);
        }
        (_, Some(at)) => {
            put_expiring(txn, &args[1], v.value, at);
            let event = if at as u64 > txn.now { "expire" } else { "del" };
            txn.notify(ev::GENERIC, event, &args[1]);
        }
        _ => {}
    }
    Ok(())
}

fn getrange(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (mut start, mut end) = (int_arg(&args[2])?, int_arg(&args[3])?);
    let v = txn.get(&args[1])?.map(|v| v.value).unwrap_or_default();
    let len = v.len() as i64;
    if start < 0 && end < 0 && start > end {
        out.bulk(b"");
        return Ok(());
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        out.bulk(b"");
    } else {
        out.bulk(&v[start as usize..=end as usize]);
    }
    Ok(())
}

fn setrange(args: &[Bytes], txn: &mut Txn<'_>, ctx: &Ctx, out: &mut Out) -> CmdResult {
    let offset = int_arg(&args[2])?;
    if offset < 0 {
        return Err("ERR offset is out of range".to_owned());
    }
    let piece = &args[3];
    let cur = txn.get(&args[1])?;
    if piece.is_empty() {
        out.int(cur.map_or(0, |c| c.value.len() as i64));
        return Ok(());
    }
    if offset as u64 + piece.len() as u64 > ctx.max_bulk_bytes as u64 {
        return Err(TOO_BIG.to_owned());
    }
    let mut cur = cur.unwrap_or(Entry::plain(Vec::new()));
    let offset = offset as usize;
    let mut value = cur.value.to_vec();
    if value.len() < offset + piece.len() {
        value.resize(offset + piece.len(), 0);
    }
    value[offset..offset + piece.len()].copy_from_slice(piece);
    let n = value.len();
    cur.value = value.into();
    txn.set(&args[1], cur);
    txn.notify(ev::STRING, "setrange", &args[1]);
    out.int(n as i64);
    Ok(())
}

fn incr(txn: &mut Txn<'_>, key: &[u8], by: i64, out: &mut Out) -> CmdResult {
    let mut cur = txn
        .get(key)?
        .unwrap_or(Entry::plain(Bytes::from_static(b"0")));
    let v = parse_i64(&cur.value).ok_or(NOT_INTEGER)?;
    let n = v.checked_add(by).ok_or(OVERFLOW)?;
    cur.value = Bytes::copy_from_slice(itoa::Buffer::new().format(n).as_bytes());
    txn.set(key, cur);
    txn.notify(ev::STRING, "incrby", key);
    out.int(n);
    Ok(())
}

/// `EXPIRE key seconds [NX|XX|GT|LT]` and its ms / absolute forms.
fn expire(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for a in &args[3..] {
        match &lower(a)[..] {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                return Err(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(a)
                ));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(
            "ERR NX and XX, GT or LT options at the same time are not compatible".to_owned(),
        );
    }
    if gt && lt {
        return Err("ERR GT and LT options at the same time are not compatible".to_owned());
    }
    let v = int_arg(&args[2])?;
    let invalid = || format!("ERR invalid expire time in '{name}' command");
    let unit: i64 = if name.starts_with('p') { 1 } else { 1000 };
    let mut at = v.checked_mul(unit).ok_or_else(invalid)?;
    if !name.ends_with("at") {
        at = at.checked_add(txn.now as i64).ok_or_else(invalid)?;
    }
    let Some(mut cur) = txn.rec(&args[1]).map_err(engine)? else {
        out.int(0);
        return Ok(());
    };
    let ok = match cur.expire_at_ms() {
        // No expiry counts as an infinite one for GT and LT.
        None => !(xx || gt),
        Some(old) => !nx && (!gt || at > old as i64) && (!lt || at < old as i64),
    };
    if !ok {
        out.int(0);
        return Ok(());
    }
    if at <= txn.now as i64 {
        txn.delete(&args[1]);
        txn.notify(ev::GENERIC, "del", &args[1]);
    } else {
        cur.set_expire_at_ms(Some(at as u64));
        txn.put(&args[1], cur);
        txn.notify(ev::GENERIC, "expire", &args[1]);
    }
    out.int(1);
    Ok(())
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`. The cursor is the
/// key hash to resume at (keys are stored in hash order), so it needs no
/// server state. Every key present for the whole iteration is returned,
/// exactly once: a call visits COUNT keys, then finishes the hash it is
/// in, and the next call starts at the next hash.
fn scan(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let cursor: u64 = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("ERR invalid cursor")?;
    let (mut pattern, mut count, mut type_want) = (None, 10i64, None);
    let mut i = 2;
    while i < args.len() {
        let opt = lower(&args[i]);
        let Some(val) = args.get(i + 1) else {
            return Err(SYNTAX.to_owned());
        };
        match &opt[..] {
            b"match" => pattern = Some(val.clone()),
            b"count" => {
                count = int_arg(val)?;
                if count < 1 {
                    return Err(SYNTAX.to_owned());
                }
            }
            b"type" => type_want = Some(lower(val)),
            _ => return Err(SYNTAX.to_owned()),
        }
        i += 2;
    }
    let mut keys = Vec::new();
    let mut expired = Vec::new();
    let mut seen = 0i64;
    let mut last_hash = None;
    let mut next = 0u64;
    txn.keyspace()
        .scan_seeing_expired(
            txn.db,
            cursor,
            txn.now,
            |h, k, r| {
                // Past COUNT, finish the hash bucket being read, then stop.
                if seen >= count && last_hash != Some(h) {
                    next = h;
                    return false;
                }
                seen += 1;
                last_hash = Some(h);
                let type_ok = type_want
                    .as_ref()
                    .is_none_or(|t| t.as_slice() == r.type_name().as_bytes());
                if type_ok && pattern.as_ref().is_none_or(|p| glob::matches(p, k, false)) {
                    keys.push(k.to_vec());
                }
                true
            },
            // redis-server's SCAN expires the expired keys its MATCH
            // pattern lets through; with TYPE, its lookup of the key's
            // type also reports the miss.
            |k| {
                if pattern.as_ref().is_none_or(|p| glob::matches(p, k, false)) {
                    expired.push(k.to_vec());
                }
            },
        )
        .map_err(engine)?;
    for k in expired {
        txn.note_expired(&k);
        if type_want.is_some() {
            txn.note_keymiss(&k);
        }
    }
    out.array(2);
    out.bulk(next.to_string().as_bytes());
    out.array(keys.len());
    for k in keys {
        out.bulk(&k);
    }
    Ok(())
}
