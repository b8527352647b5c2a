//! `DUMP` and `RESTORE`: a key's value as a self-checking payload, in our
//! own format (`docs/format/dump-payload.md`), not redis-server's RDB.
//!
//! The payload is logical: a type, then the string or the elements in
//! their order (fields and values, members, list elements, members and
//! scores), never our element keys. `RESTORE` rebuilds the collection
//! through the same element layout the commands write, under a new
//! version, so a payload can neither carry a stale version nor set a
//! count that disagrees with the elements. A payload whose checksum or
//! format does not match is refused with redis-server's error, and one
//! whose checksum matches but whose body does not parse (or holds a
//! duplicate member, a NaN score or no elements) with "Bad data format":
//! never a panic, never a partial key.

use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_64;

use crate::data::{engine, int_arg, CmdResult, SYNTAX};
use crate::resp::Out;
use crate::store::{list_seq, CollKind, Entry, Meta, Rec, Txn};

/// Payload type bytes (the first byte).
const TYPE_STRING: u8 = 0;
const TYPE_HASH: u8 = 1;
const TYPE_LIST: u8 = 2;
const TYPE_SET: u8 = 3;
const TYPE_ZSET: u8 = 4;

/// The format of the footer's version field: the high bit marks our own
/// format, so no redis-server RDB version (at most 10 for 7.0) matches.
pub const FORMAT_VERSION: u16 = 0x8001;
/// Footer: format version u16 LE, then xxh3-64 u64 LE of all before it.
pub const FOOTER_BYTES: usize = 10;
const _: () = assert!(FOOTER_BYTES == 2 + 8);

const BAD_PAYLOAD: &str = "ERR DUMP payload version or checksum are wrong";
const BAD_DATA: &str = "ERR Bad data format";

/// Runs `DUMP` or `RESTORE`; `None` if `name` is neither.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> Option<CmdResult> {
    Some(match name {
        "dump" => dump(args, txn, out),
        "restore" => restore(args, txn, out),
        _ => return None,
    })
}

/// The logical value of a key, as a payload holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Vec<u8>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    ZSet(Vec<(Vec<u8>, f64)>),
}

fn put_bytes(p: &mut Vec<u8>, b: &[u8]) {
    p.extend_from_slice(&(b.len() as u32).to_le_bytes());
    p.extend_from_slice(b);
}

impl Value {
    /// The payload: type u8, body, format version u16 LE, xxh3-64 u64 LE.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::new();
        let count = |p: &mut Vec<u8>, n: usize| p.extend_from_slice(&(n as u64).to_le_bytes());
        match self {
            Value::Str(v) => {
                p.push(TYPE_STRING);
                p.extend_from_slice(v);
            }
            Value::Hash(pairs) => {
                p.push(TYPE_HASH);
                count(&mut p, pairs.len());
                for (f, v) in pairs {
                    put_bytes(&mut p, f);
                    put_bytes(&mut p, v);
                }
            }
            Value::List(items) | Value::Set(items) => {
                p.push(if matches!(self, Value::List(_)) {
                    TYPE_LIST
                } else {
                    TYPE_SET
                });
                count(&mut p, items.len());
                for i in items {
                    put_bytes(&mut p, i);
                }
            }
            Value::ZSet(items) => {
                p.push(TYPE_ZSET);
                count(&mut p, items.len());
                for (m, s) in items {
                    put_bytes(&mut p, m);
                    p.extend_from_slice(&s.to_le_bytes());
                }
            }
        }
        p.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let sum = xxh3_64(&p);
        p.extend_from_slice(&sum.to_le_bytes());
        p
    }

    /// Checks the footer, then parses the body; the error is the reply.
    pub fn decode(payload: &[u8]) -> Result<Value, &'static str> {
        if payload.len() < 1 + FOOTER_BYTES {
            return Err(BAD_PAYLOAD);
        }
        let (signed, sum) = payload.split_at(payload.len() - 8);
        let version = u16::from_le_bytes([signed[signed.len() - 2], signed[signed.len() - 1]]);
        if version != FORMAT_VERSION || xxh3_64(signed).to_le_bytes() != sum {
            return Err(BAD_PAYLOAD);
        }
        let body = &signed[1..signed.len() - 2];
        Body { rest: body }.parse(signed[0]).ok_or(BAD_DATA)
    }
}

/// A cursor over a payload's body.
struct Body<'a> {
    rest: &'a [u8],
}

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Some(a)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize;
        Some(self.take(n)?.to_vec())
    }

    /// The count of a collection: at least one element, and no more than
    /// the body could hold (each element takes at least 4 bytes), so a
    /// damaged count cannot make us reserve memory it does not back.
    fn count(&mut self) -> Option<usize> {
        let n = self.u64()?;
        (n >= 1 && n <= (self.rest.len() / 4) as u64).then_some(n as usize)
    }

    fn parse(mut self, ty: u8) -> Option<Value> {
        let v = match ty {
            TYPE_STRING => return Some(Value::Str(std::mem::take(&mut self.rest).to_vec())),
            TYPE_HASH => {
                let n = self.count()?;
                let mut pairs = Vec::with_capacity(n);
                for _ in 0..n {
                    pairs.push((self.bytes()?, self.bytes()?));
                }
                Value::Hash(pairs)
            }
            TYPE_LIST | TYPE_SET => {
                let n = self.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.bytes()?);
                }
                if ty == TYPE_LIST {
                    Value::List(items)
                } else {
                    Value::Set(items)
                }
            }
            TYPE_ZSET => {
                let n = self.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let m = self.bytes()?;
                    let s = f64::from_le_bytes(self.take(8)?.try_into().ok()?);
                    if s.is_nan() {
                        return None;
                    }
                    items.push((m, s));
                }
                Value::ZSet(items)
            }
            _ => return None,
        };
        // Every byte is accounted for, and no member appears twice.
        (self.rest.is_empty() && v.distinct()).then_some(v)
    }
}

impl Value {
    /// No field or member appears twice (a list may repeat elements).
    fn distinct(&self) -> bool {
        let mut names: Vec<&[u8]> = match self {
            Value::Str(_) | Value::List(_) => return true,
            Value::Hash(p) => p.iter().map(|(f, _)| &f[..]).collect(),
            Value::Set(s) => s.iter().map(|m| &m[..]).collect(),
            Value::ZSet(z) => z.iter().map(|(m, _)| &m[..]).collect(),
        };
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        names.len() == n
    }
}

/// Reads `key`'s value as a [`Value`]; `None` if it has none.
fn read_value(txn: &mut Txn<'_>, key: &[u8]) -> Result<Option<Value>, String> {
    let m = match txn.rec(key).map_err(engine)? {
        None => return Ok(None),
        Some(Rec::Str(e)) => return Ok(Some(Value::Str(e.value.to_vec()))),
        Some(Rec::Coll(m)) => m,
    };
    // Element keys of a list are in position order.
    let elems = match m.kind {
        CollKind::List => txn.all_elems(&m),
        _ => txn.names(&m),
    }
    .map_err(engine)?;
    Ok(Some(match m.kind {
        CollKind::Hash => Value::Hash(elems),
        CollKind::Set => Value::Set(elems.into_iter().map(|(k, _)| k).collect()),
        CollKind::List => Value::List(elems.into_iter().map(|(_, v)| v).collect()),
        CollKind::ZSet => Value::ZSet(
            elems
                .into_iter()
                .map(|(k, v)| {
                    let score =
                        crate::store::stored_score(&crate::store::zset_member_key(&m, &k), &v);
                    Ok((k, score.map_err(|d| txn.damaged(d))?))
                })
                .collect::<Result<_, String>>()?,
        ),
    }))
}

/// `DUMP key`: the payload, or nil.
fn dump(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    match read_value(txn, &args[1])? {
        Some(v) => out.bulk(&v.encode()),
        None => out.null(),
    }
    Ok(())
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]`,
/// checked in redis-server's order; `IDLETIME` and `FREQ` are validated
/// and ignored (no eviction here).
fn restore(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (mut replace, mut absttl) = (false, false);
    let (mut idle, mut freq) = (false, false);
    let mut j = 4;
    while j < args.len() {
        let more = args.len() - j - 1;
        let opt = args[j].to_ascii_lowercase();
        match &opt[..] {
            b"replace" => replace = true,
            b"absttl" => absttl = true,
            b"idletime" if more >= 1 && !freq => {
                if int_arg(&args[j + 1])? < 0 {
                    return Err("ERR Invalid IDLETIME value, must be >= 0".to_owned());
                }
                idle = true;
                j += 1;
            }
            b"freq" if more >= 1 && !idle => {
                let f = int_arg(&args[j + 1])?;
                if !(0..=255).contains(&f) {
                    return Err("ERR Invalid FREQ value, must be >= 0 and <= 255".to_owned());
                }
                freq = true;
                j += 1;
            }
            _ => return Err(SYNTAX.to_owned()),
        }
        j += 1;
    }
    let key = &args[1];
    if !replace && txn.exists(key)? {
        return Err("BUSYKEY Target key name already exists.".to_owned());
    }
    let ttl = int_arg(&args[2])?;
    if ttl < 0 {
        return Err("ERR Invalid TTL value, must be >= 0".to_owned());
    }
    let value = Value::decode(&args[3]).map_err(str::to_owned)?;
    let at = match ttl {
        0 => None,
        t if absttl => Some(t as u64),
        t => Some((t as u64).saturating_add(txn.now)),
    };
    // The old value of any type is replaced (and becomes garbage).
    let existed = txn.rec(key).map_err(engine)?.is_some();
    if at.is_some_and(|at| at <= txn.now) {
        txn.delete(key);
        if existed {
            txn.notify(crate::notify::GENERIC, "del", key);
        }
    } else {
        if existed {
            // redis-server deletes the old key, then adds the new as new.
            txn.notify(crate::notify::NEW, "new", key);
        }
        write_value(txn, key, value, at)?;
        txn.notify(crate::notify::GENERIC, "restore", key);
    }
    out.ok();
    Ok(())
}

/// Stages `key = value` under a new version for a collection.
fn write_value(txn: &mut Txn<'_>, key: &[u8], value: Value, at: Option<u64>) -> CmdResult {
    let kind = match &value {
        Value::Str(v) => {
            txn.set(
                key,
                Entry {
                    value: Bytes::copy_from_slice(v),
                    expire_at_ms: at,
                },
            );
            return Ok(());
        }
        Value::Hash(_) => CollKind::Hash,
        Value::List(_) => CollKind::List,
        Value::Set(_) => CollKind::Set,
        Value::ZSet(_) => CollKind::ZSet,
    };
    let mut m: Meta = txn.new_coll(kind)?;
    m.expire_at_ms = at;
    match value {
        Value::Str(_) => unreachable!("handled above"),
        Value::Hash(pairs) => {
            for (f, v) in pairs {
                txn.elem_put(m.named(&f), v);
                m.count += 1;
            }
        }
        Value::Set(members) => {
            for s in members {
                txn.elem_put(m.named(&s), Vec::new());
                m.count += 1;
            }
        }
        Value::List(items) => {
            for v in items {
                txn.elem_put(m.elem(&list_seq(m.tail)), v);
                m.tail += 1;
                m.count += 1;
            }
        }
        Value::ZSet(items) => {
            for (member, score) in items {
                crate::zset::put(txn, &mut m, &member, score, None);
            }
        }
    }
    txn.put_meta(key, m);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of `docs/format/dump-payload.md`.
    #[test]
    fn the_worked_example_encodes_as_documented() {
        let p = Value::List(vec![b"a".to_vec(), b"bc".to_vec()]).encode();
        let body: &[u8] = &[
            0x02, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, b'a', 2, 0, 0, 0, b'b', b'c', 0x01, 0x80,
        ];
        assert_eq!(&p[..body.len()], body);
        assert_eq!(p[body.len()..], xxh3_64(body).to_le_bytes());
    }

    #[test]
    fn every_type_round_trips() {
        for v in [
            Value::Str(b"".to_vec()),
            Value::Str(b"hello".to_vec()),
            Value::Hash(vec![
                (b"f".to_vec(), b"v".to_vec()),
                (b"g".to_vec(), vec![]),
            ]),
            Value::List(vec![b"x".to_vec(), b"x".to_vec()]),
            Value::Set(vec![b"a".to_vec(), b"b".to_vec()]),
            Value::ZSet(vec![(b"m".to_vec(), -1.5), (b"n".to_vec(), f64::INFINITY)]),
        ] {
            assert_eq!(Value::decode(&v.encode()), Ok(v));
        }
    }

    /// Every single-byte change and every truncation of a payload is
    /// refused with an error, never a panic or another value.
    #[test]
    fn damage_is_refused() {
        let v = Value::ZSet(vec![(b"m".to_vec(), 2.0), (b"n".to_vec(), 3.0)]);
        let p = v.encode();
        for i in 0..p.len() {
            for bit in 0..8 {
                let mut d = p.clone();
                d[i] ^= 1 << bit;
                assert!(Value::decode(&d).is_err(), "flip of bit {bit} at byte {i}");
            }
        }
        for n in 0..p.len() {
            assert!(Value::decode(&p[..n]).is_err(), "truncated to {n} bytes");
        }
    }

    /// A body that passes the checksum but breaks the format's rules
    /// (as a hand-made payload might): bad data, not a panic.
    #[test]
    fn malformed_bodies_are_bad_data() {
        let sign = |body: &[u8]| {
            let mut p = body.to_vec();
            p.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
            let sum = xxh3_64(&p);
            p.extend_from_slice(&sum.to_le_bytes());
            p
        };
        let cases: &[&[u8]] = &[
            &[9],                                        // unknown type
            &[TYPE_SET, 0, 0, 0, 0, 0, 0, 0, 0],         // empty collection
            &[TYPE_SET, 255, 255, 255, 255, 0, 0, 0, 0], // count past the body
            &[
                TYPE_SET, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, b'a', 1, 0, 0, 0, b'a',
            ], // duplicate
            &[TYPE_LIST, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, b'a'], // length past the end
            &[TYPE_LIST, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, b'a', 0], // trailing byte
        ];
        for body in cases {
            assert_eq!(Value::decode(&sign(body)), Err(BAD_DATA), "{body:?}");
        }
        let mut nan = vec![TYPE_ZSET, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, b'm'];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(Value::decode(&sign(&nan)), Err(BAD_DATA));
    }
}
