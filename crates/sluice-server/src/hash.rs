//! Hashes: a metadata record and one engine key per field
//! (`'e' | version | name hash | field -> value`), so that a field is read or written
//! with one engine operation whatever the hash's size.

use bytes::Bytes;

use crate::coll::{random_picks, scan_elements, wrong_args};
use crate::data::{engine, format_float, int_arg, parse_float, CmdResult, OVERFLOW};
use crate::notify as ev;
use crate::resp::Out;
use crate::store::{CollKind, Meta, Txn};

const HASH: CollKind = CollKind::Hash;

fn meta_or_new(txn: &mut Txn<'_>, key: &[u8]) -> Result<Meta, String> {
    match txn.coll(key, HASH)? {
        Some(m) => Ok(m),
        None => txn.new_coll(HASH),
    }
}

/// Runs a hash command; `None` if `name` is not one.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> Option<CmdResult> {
    let r = match name {
        "hset" | "hmset" => hset(name, args, txn, out),
        "hsetnx" => hsetnx(args, txn, out),
        "hget" => (|| {
            let v = match txn.coll(&args[1], HASH)? {
                Some(m) => txn.elem(&m.named(&args[2])).map_err(engine)?,
                None => None,
            };
            out.opt_bulk(v.as_deref());
            Ok(())
        })(),
        "hmget" => (|| {
            let m = txn.coll(&args[1], HASH)?;
            out.array(args.len() - 2);
            let values = match &m {
                Some(m) => {
                    let ekeys: Vec<Vec<u8>> = args[2..].iter().map(|f| m.named(f)).collect();
                    txn.elems(&ekeys).map_err(engine)?
                }
                None => vec![None; args.len() - 2],
            };
            for v in values {
                out.opt_bulk(v.as_deref());
            }
            Ok(())
        })(),
        "hdel" => (|| {
            let Some(mut m) = txn.coll(&args[1], HASH)? else {
                out.int(0);
                return Ok(());
            };
            let mut n = 0;
            for f in &args[2..] {
                let ek = m.named(f);
                if txn.elem(&ek).map_err(engine)?.is_some() {
                    txn.elem_del(ek);
                    n += 1;
                }
            }
            m.count -= n;
            if n > 0 {
                txn.put_meta(&args[1], m);
                txn.notify(ev::HASH, "hdel", &args[1]);
            }
            out.int(n as i64);
            Ok(())
        })(),
        "hexists" => (|| {
            let found = match txn.coll(&args[1], HASH)? {
                Some(m) => txn.elem(&m.named(&args[2])).map_err(engine)?.is_some(),
                None => false,
            };
            out.int(i64::from(found));
            Ok(())
        })(),
        "hlen" => txn.coll(&args[1], HASH).map(|m| {
            out.int(m.map_or(0, |m| m.count as i64));
        }),
        "hstrlen" => (|| {
            let v = match txn.coll(&args[1], HASH)? {
                Some(m) => txn.elem(&m.named(&args[2])).map_err(engine)?,
                None => None,
            };
            out.int(v.map_or(0, |v| v.len() as i64));
            Ok(())
        })(),
        "hgetall" | "hkeys" | "hvals" => (|| {
            let pairs = match txn.coll(&args[1], HASH)? {
                Some(m) => txn.names(&m).map_err(engine)?,
                None => Vec::new(),
            };
            match name {
                "hgetall" => {
                    out.map(pairs.len());
                    for (f, v) in &pairs {
                        out.bulk(f);
                        out.bulk(v);
                    }
                }
                _ => {
                    out.array(pairs.len());
                    for (f, v) in &pairs {
                        out.bulk(if name == "hkeys" { f } else { v });
                    }
                }
            }
            Ok(())
        })(),
        "hincrby" => hincrby(args, txn, out),
        "hincrbyfloat" => hincrbyfloat(args, txn, out),
        "hscan" => (|| {
            let m = txn.coll(&args[1], HASH)?;
            scan_elements(txn, m.as_ref(), &[], args, out, true)
        })(),
        "hrandfield" => hrandfield(args, txn, out),
        _ => return None,
    };
    Some(r)
}

fn hset(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    if !args.len().is_multiple_of(2) {
        return Err(wrong_args(name));
    }
    let mut m = meta_or_new(txn, &args[1])?;
    let mut added = 0;
    for pair in args[2..].chunks(2) {
        let ek = m.named(&pair[0]);
        if txn.elem(&ek).map_err(engine)?.is_none() {
            added += 1;
        }
        txn.elem_put(ek, pair[1].to_vec());
    }
    // The record changes only when a field is added.
    if added > 0 {
        m.count += added;
        txn.put_meta(&args[1], m);
    } else {
        txn.modified(&args[1]);
    }
    if name == "hset" {
        txn.notify(ev::HASH, "hset", &args[1]);
        out.int(added as i64);
    } else {
        txn.notify(ev::HASH, "hset", &args[1]);
        out.ok();
    }
    Ok(())
}

fn hsetnx(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let mut m = meta_or_new(txn, &args[1])?;
    let ek = m.named(&args[2]);
    if txn.elem(&ek).map_err(engine)?.is_some() {
        out.int(0);
        return Ok(());
    }
    txn.elem_put(ek, args[3].to_vec());
    m.count += 1;
    txn.put_meta(&args[1], m);
    txn.notify(ev::HASH, "hset", &args[1]);
    out.int(1);
    Ok(())
}

/// Stages `field = value` in `m`, counting it if it is new.
fn put_field(txn: &mut Txn<'_>, key: &[u8], mut m: Meta, ek: Vec<u8>, new: bool, value: Vec<u8>) {
    txn.elem_put(ek, value);
    if new {
        m.count += 1;
        txn.put_meta(key, m);
    } else {
        txn.modified(key);
    }
}

fn hincrby(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let by = int_arg(&args[3])?;
    let m = meta_or_new(txn, &args[1])?;
    let ek = m.named(&args[2]);
    let old = txn.elem(&ek).map_err(engine)?;
    let cur = match &old {
        Some(v) => crate::data::parse_i64(v).ok_or("ERR hash value is not an integer")?,
        None => 0,
    };
    let n = cur.checked_add(by).ok_or(OVERFLOW)?;
    let text = itoa::Buffer::new().format(n).as_bytes().to_vec();
    put_field(txn, &args[1], m, ek, old.is_none(), text);
    txn.notify(ev::HASH, "hincrby", &args[1]);
    out.int(n);
    Ok(())
}

fn hincrbyfloat(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let by = parse_float(&args[3]).ok_or(crate::data::NOT_FLOAT)?;
    if !by.is_finite() {
        // redis-server checks the increment first, in these words.
        return Err("ERR value is NaN or Infinity".to_owned());
    }
    let m = meta_or_new(txn, &args[1])?;
    let ek = m.named(&args[2]);
    let old = txn.elem(&ek).map_err(engine)?;
    let cur = match &old {
        Some(v) => parse_float(v).ok_or("ERR hash value is not a float")?,
        None => 0.0,
    };
    let sum = cur + by;
    if !sum.is_finite() {
        return Err("ERR increment would produce NaN or Infinity".to_owned());
    }
    let text = format_float(sum);
    put_field(
        txn,
        &args[1],
        m,
        ek,
        old.is_none(),
        text.clone().into_bytes(),
    );
    txn.notify(ev::HASH, "hincrbyfloat", &args[1]);
    out.bulk(text.as_bytes());
    Ok(())
}

/// `HRANDFIELD key [count [WITHVALUES]]`.
fn hrandfield(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    if args.len() > 4 || (args.len() == 4 && !args[3].eq_ignore_ascii_case(b"withvalues")) {
        return Err(crate::data::SYNTAX.to_owned());
    }
    let count = match args.get(2) {
        Some(c) => Some(crate::coll::pick_count(c)?),
        None => None,
    };
    let with_values = args.len() == 4;
    let pairs = match txn.coll(&args[1], HASH)? {
        Some(m) => txn.names(&m).map_err(engine)?,
        None => Vec::new(),
    };
    let Some(count) = count else {
        let pick = random_picks(pairs.len(), 1).into_iter().next();
        out.opt_bulk(pick.map(|i| &pairs[i].0[..]));
        return Ok(());
    };
    let picks = random_picks(pairs.len(), count);
    if with_values && out.resp3 {
        out.array(picks.len());
        for i in picks {
            out.array(2);
            out.bulk(&pairs[i].0);
            out.bulk(&pairs[i].1);
        }
    } else {
        out.array(picks.len() * if with_values { 2 } else { 1 });
        for i in picks {
            out.bulk(&pairs[i].0);
            if with_values {
                out.bulk(&pairs[i].1);
            }
        }
    }
    Ok(())
}
