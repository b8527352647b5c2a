//! Lists: a metadata record with the positions `head .. tail` and one
//! engine key per element at its position, so that pushes, pops,
//! `LINDEX` and `LSET` are one element read or write. The blocking pops
//! (`BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH`, `BLMPOP`) run as their non-blocking
//! selves here; when there is nothing to pop they set `txn.would_block`
//! and the caller parks the client (`block.rs`).

use bytes::Bytes;

use crate::coll::wrong_args;
use crate::data::{engine, int_arg, parse_i64, CmdResult, SYNTAX};
use crate::notify as ev;
use crate::resp::Out;
use crate::store::{list_seq, misplaced_list_element, missing_list_element, CollKind, Meta, Txn};

const LIST: CollKind = CollKind::List;

fn elem_key(m: &Meta, seq: i64) -> Vec<u8> {
    m.elem(&list_seq(seq))
}

/// Runs a list command; `None` if `name` is not one.
pub fn run(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> Option<CmdResult> {
    let r = match name {
        "lpush" | "rpush" | "lpushx" | "rpushx" => push(name, args, txn, out),
        "lpop" | "rpop" => pop_cmd(name, args, txn, out),
        "llen" => txn.coll(&args[1], LIST).map(|m| {
            out.int(m.map_or(0, |m| m.count as i64));
        }),
        "lrange" => lrange(args, txn, out),
        "lindex" => lindex(args, txn, out),
        "lset" => lset(args, txn, out),
        "linsert" => linsert(args, txn, out),
        "lrem" => lrem(args, txn, out),
        "ltrim" => ltrim(args, txn, out),
        "lpos" => lpos(args, txn, out),
        "lmove" | "rpoplpush" | "blmove" | "brpoplpush" => lmove(name, args, txn, out),
        "blpop" | "brpop" => bpop(name, args, txn, out),
        "lmpop" | "blmpop" => mpop(name, args, txn, out),
        _ => return None,
    };
    Some(r)
}

/// Appends `vals` at the left or right end, creating the list.
pub fn push_values(
    txn: &mut Txn<'_>,
    key: &[u8],
    m: Option<Meta>,
    vals: &[&[u8]],
    left: bool,
) -> Result<u64, String> {
    let mut m = match m {
        Some(m) => m,
        None => txn.new_coll(LIST)?,
    };
    for v in vals {
        let seq = if left {
            m.head -= 1;
            m.head
        } else {
            m.tail += 1;
            m.tail - 1
        };
        txn.elem_put(elem_key(&m, seq), v.to_vec());
        m.count += 1;
    }
    let n = m.count;
    txn.put_meta(key, m);
    txn.notify(ev::LIST, if left { "lpush" } else { "rpush" }, key);
    Ok(n)
}

fn push(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let m = txn.coll(&args[1], LIST)?;
    if m.is_none() && name.ends_with('x') {
        out.int(0);
        return Ok(());
    }
    let vals: Vec<&[u8]> = args[2..].iter().map(|a| &a[..]).collect();
    let n = push_values(txn, &args[1], m, &vals, name.starts_with('l'))?;
    out.int(n as i64);
    Ok(())
}

/// Removes up to `n` elements from one end; stages the record.
pub fn pop_values(
    txn: &mut Txn<'_>,
    key: &[u8],
    mut m: Meta,
    n: u64,
    left: bool,
) -> Result<Vec<Vec<u8>>, String> {
    let mut vals = Vec::new();
    while (vals.len() as u64) < n && m.count > 0 {
        let seq = if left { m.head } else { m.tail - 1 };
        let ek = elem_key(&m, seq);
        let v = txn
            .elem(&ek)
            .map_err(engine)?
            .ok_or_else(|| txn.damaged(missing_list_element(&m, seq)))?;
        txn.elem_del(ek);
        if left {
            m.head += 1;
        } else {
            m.tail -= 1;
        }
        m.count -= 1;
        vals.push(v);
    }
    txn.put_meta(key, m);
    if !vals.is_empty() {
        txn.notify(ev::LIST, if left { "lpop" } else { "rpop" }, key);
    }
    Ok(vals)
}

fn pop_cmd(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    if args.len() > 3 {
        return Err(wrong_args(name));
    }
    let count = match args.get(2) {
        Some(c) => {
            let c = parse_i64(c).ok_or("ERR value is out of range, must be positive")?;
            if c < 0 {
                return Err("ERR value is out of range, must be positive".to_owned());
            }
            Some(c as u64)
        }
        None => None,
    };
    let Some(m) = txn.coll(&args[1], LIST)? else {
        match count {
            Some(_) => out.null_array(),
            None => out.null(),
        }
        return Ok(());
    };
    let left = name == "lpop";
    match count {
        None => {
            let v = pop_values(txn, &args[1], m, 1, left)?;
            out.opt_bulk(v.first().map(|v| &v[..]));
        }
        Some(n) => {
            let v = pop_values(txn, &args[1], m, n, left)?;
            out.array(v.len());
            for e in v {
                out.bulk(&e);
            }
        }
    }
    Ok(())
}

/// Redis's range rule: negative indexes count from the end; the result
/// is clamped to the list, `None` when empty.
fn clamp(start: i64, stop: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { start + len } else { start }.max(0);
    let stop = if stop < 0 { stop + len } else { stop };
    let stop = stop.min(len - 1);
    (start <= stop && start < len).then_some((start, stop))
}

/// Elements at indexes `start ..= stop` (already clamped). Each engine
/// key must be the next position: a key between two positions, or a
/// position missing, is damage (the record promises every position
/// `head .. tail`), never a shorter or longer reply.
fn read_range(txn: &Txn<'_>, m: &Meta, start: i64, stop: i64) -> Result<Vec<Vec<u8>>, String> {
    let mut v = Vec::with_capacity((stop - start + 1) as usize);
    let mut bad = None;
    txn.elems_in(
        &elem_key(m, m.head + start),
        &elem_key(m, m.head + stop + 1),
        false,
        |k, val| {
            // Every key in the range has the list's prefix.
            let want = m.head + start + v.len() as i64;
            if m.suffix_of(k) != list_seq(want) {
                bad = Some(misplaced_list_element(m, k, want));
                return false;
            }
            v.push(val.to_vec());
            true
        },
    )
    .map_err(engine)?;
    if bad.is_none() && v.len() as i64 != stop - start + 1 {
        let want = m.head + start + v.len() as i64;
        bad = Some(missing_list_element(m, want));
    }
    match bad {
        Some(d) => Err(txn.damaged(d)),
        None => Ok(v),
    }
}

fn lrange(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (start, stop) = (int_arg(&args[2])?, int_arg(&args[3])?);
    let Some(m) = txn.coll(&args[1], LIST)? else {
        out.array(0);
        return Ok(());
    };
    let vals = match clamp(start, stop, m.count as i64) {
        Some((a, b)) => read_range(txn, &m, a, b)?,
        None => Vec::new(),
    };
    out.array(vals.len());
    for v in vals {
        out.bulk(&v);
    }
    Ok(())
}

/// The position of index `i` (negative from the end), if inside.
fn position(m: &Meta, i: i64) -> Option<i64> {
    let len = m.count as i64;
    let i = if i < 0 { i + len } else { i };
    (0..len).contains(&i).then_some(m.head + i)
}

fn lindex(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let i = int_arg(&args[2])?;
    let v = match txn.coll(&args[1], LIST)? {
        Some(m) => match position(&m, i) {
            Some(seq) => Some(
                txn.elem(&elem_key(&m, seq))
                    .map_err(engine)?
                    .ok_or_else(|| txn.damaged(missing_list_element(&m, seq)))?,
            ),
            None => None,
        },
        None => None,
    };
    out.opt_bulk(v.as_deref());
    Ok(())
}

fn lset(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let i = int_arg(&args[2])?;
    let Some(m) = txn.coll(&args[1], LIST)? else {
        return Err("ERR no such key".to_owned());
    };
    let seq = position(&m, i).ok_or("ERR index out of range")?;
    txn.elem_put(elem_key(&m, seq), args[3].to_vec());
    txn.modified(&args[1]);
    txn.notify(ev::LIST, "lset", &args[1]);
    out.ok();
    Ok(())
}

/// Replaces the list's elements with `vals`, keeping `head`: writes the
/// positions whose element changed and deletes those past the new end.
fn rewrite(txn: &mut Txn<'_>, key: &[u8], mut m: Meta, old: &[Vec<u8>], vals: Vec<Vec<u8>>) {
    for (i, v) in vals.iter().enumerate() {
        if old.get(i) != Some(v) {
            txn.elem_put(elem_key(&m, m.head + i as i64), v.clone());
        }
    }
    for i in vals.len()..old.len() {
        txn.elem_del(elem_key(&m, m.head + i as i64));
    }
    m.count = vals.len() as u64;
    m.tail = m.head + vals.len() as i64;
    txn.put_meta(key, m);
}

fn all(txn: &Txn<'_>, m: &Meta) -> Result<Vec<Vec<u8>>, String> {
    if m.count == 0 {
        return Ok(Vec::new());
    }
    read_range(txn, m, 0, m.count as i64 - 1)
}

fn linsert(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let before = match &args[2].to_ascii_lowercase()[..] {
        b"before" => true,
        b"after" => false,
        _ => return Err(SYNTAX.to_owned()),
    };
    let Some(m) = txn.coll(&args[1], LIST)? else {
        out.int(0);
        return Ok(());
    };
    let old = all(txn, &m)?;
    let Some(at) = old.iter().position(|v| v[..] == args[3][..]) else {
        out.int(-1);
        return Ok(());
    };
    let mut vals = old.clone();
    vals.insert(if before { at } else { at + 1 }, args[4].to_vec());
    let n = vals.len();
    rewrite(txn, &args[1], m, &old, vals);
    txn.notify(ev::LIST, "linsert", &args[1]);
    out.int(n as i64);
    Ok(())
}

fn lrem(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let count = int_arg(&args[2])?;
    let Some(m) = txn.coll(&args[1], LIST)? else {
        out.int(0);
        return Ok(());
    };
    let old = all(txn, &m)?;
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let mut removed = 0;
    let mut keep = vec![true; old.len()];
    let order: Box<dyn Iterator<Item = usize>> = if count < 0 {
        Box::new((0..old.len()).rev())
    } else {
        Box::new(0..old.len())
    };
    for i in order {
        if removed == limit {
            break;
        }
        if old[i][..] == args[3][..] {
            keep[i] = false;
            removed += 1;
        }
    }
    if removed > 0 {
        let vals = old
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(v, _)| v.clone())
            .collect();
        rewrite(txn, &args[1], m, &old, vals);
        txn.notify(ev::LIST, "lrem", &args[1]);
    }
    out.int(removed as i64);
    Ok(())
}

fn ltrim(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (start, stop) = (int_arg(&args[2])?, int_arg(&args[3])?);
    let Some(mut m) = txn.coll(&args[1], LIST)? else {
        out.ok();
        return Ok(());
    };
    let (keep_from, keep_to) = match clamp(start, stop, m.count as i64) {
        Some((a, b)) => (m.head + a, m.head + b + 1),
        None => (m.tail, m.tail),
    };
    for seq in (m.head..keep_from).chain(keep_to..m.tail) {
        txn.elem_del(elem_key(&m, seq));
    }
    m.head = keep_from;
    m.tail = keep_to.max(keep_from);
    m.count = (m.tail - m.head) as u64;
    txn.put_meta(&args[1], m);
    txn.notify(ev::LIST, "ltrim", &args[1]);
    out.ok();
    Ok(())
}

/// `LPOS key element [RANK r] [COUNT n] [MAXLEN len]`.
fn lpos(args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
    let mut i = 3;
    while i < args.len() {
        let Some(val) = args.get(i + 1) else {
            return Err(SYNTAX.to_owned());
        };
        match &args[i].to_ascii_lowercase()[..] {
            b"rank" => {
                rank = int_arg(val)?;
                if rank == i64::MIN {
                    return Err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807".to_owned());
                }
                if rank == 0 {
                    return Err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list".to_owned());
                }
            }
            b"count" => {
                let c = int_arg(val)?;
                if c < 0 {
                    return Err("ERR COUNT can't be negative".to_owned());
                }
                count = Some(c);
            }
            b"maxlen" => {
                maxlen = int_arg(val)?;
                if maxlen < 0 {
                    return Err("ERR MAXLEN can't be negative".to_owned());
                }
            }
            _ => return Err(SYNTAX.to_owned()),
        }
        i += 2;
    }
    let vals = match txn.coll(&args[1], LIST)? {
        Some(m) => all(txn, &m)?,
        None => Vec::new(),
    };
    let n = vals.len();
    let idx: Box<dyn Iterator<Item = usize>> = if rank < 0 {
        Box::new((0..n).rev())
    } else {
        Box::new(0..n)
    };
    let mut skip = rank.unsigned_abs() - 1;
    let want = match count {
        Some(0) => usize::MAX,
        Some(c) => c as usize,
        None => 1,
    };
    let mut hits = Vec::new();
    for (compared, i) in idx.enumerate() {
        if maxlen > 0 && compared as i64 >= maxlen {
            break;
        }
        if vals[i][..] == args[2][..] {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            hits.push(i as i64);
            if hits.len() >= want {
                break;
            }
        }
    }
    match count {
        None => match hits.first() {
            Some(&h) => out.int(h),
            None => out.null(),
        },
        Some(_) => {
            out.array(hits.len());
            for h in hits {
                out.int(h);
            }
        }
    }
    Ok(())
}

fn side(arg: &[u8]) -> Result<bool, String> {
    match &arg.to_ascii_lowercase()[..] {
        b"left" => Ok(true),
        b"right" => Ok(false),
        _ => Err(SYNTAX.to_owned()),
    }
}

/// A blocking command's timeout in seconds (a float; 0: forever).
pub fn timeout_arg(arg: &[u8]) -> Result<f64, String> {
    let t = crate::data::parse_float(arg)
        .filter(|t| t.is_finite())
        .ok_or("ERR timeout is not a float or out of range")?;
    if t < 0.0 {
        return Err("ERR timeout is negative".to_owned());
    }
    Ok(t)
}

fn lmove(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let (from_left, to_left) = match name {
        "lmove" | "blmove" => (side(&args[3])?, side(&args[4])?),
        _ => (false, true),
    };
    match name {
        "blmove" => {
            timeout_arg(&args[5])?;
        }
        "brpoplpush" => {
            timeout_arg(&args[3])?;
        }
        _ => {}
    }
    // The source first: a missing one replies nil (or blocks) whatever
    // the destination holds, as in redis-server.
    let Some(src) = txn.pop_source(&args[1], LIST)? else {
        if !(name.starts_with('b') && txn.block()) {
            out.null();
        }
        return Ok(());
    };
    let dst = txn.coll(&args[2], LIST)?;
    let popped_at = txn.events_len();
    let v = pop_values(txn, &args[1], src, 1, from_left)?;
    let pushed_at = txn.events_len();
    let Some(v) = v.into_iter().next() else {
        out.null();
        return Ok(());
    };
    // The source may be the destination: read its record again.
    let dst = if args[1] == args[2] {
        txn.coll(&args[2], LIST)?
    } else {
        dst
    };
    push_values(txn, &args[2], dst, &[&v], to_left)?;
    // redis-server tells of the push before the pop.
    txn.events_after(popped_at, pushed_at);
    out.bulk(&v);
    Ok(())
}

fn bpop(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    timeout_arg(&args[args.len() - 1])?;
    for key in &args[1..args.len() - 1] {
        if let Some(m) = txn.pop_source(key, LIST)? {
            let v = pop_values(txn, key, m, 1, name == "blpop")?;
            out.array(2);
            out.bulk(key);
            out.bulk(&v[0]);
            return Ok(());
        }
    }
    if !txn.block() {
        out.null_array();
    }
    Ok(())
}

/// The arguments of `LMPOP`/`ZMPOP` and their blocking forms, from the
/// count of keys at `args[at]` on: `numkeys key... WHERE [COUNT n]`.
pub struct MultiPop<'a> {
    pub keys: &'a [Bytes],
    /// The word after the keys (`LEFT`/`RIGHT`, `MIN`/`MAX`), unchecked.
    pub side: &'a [u8],
    pub count: u64,
}

/// Parses `numkeys key... side [COUNT n]` as redis-server does, in its
/// order: the count of keys, the side's presence, then the options (the
/// caller checks the side's word, before the options as redis-server).
pub fn multi_pop_args(
    args: &[Bytes],
    at: usize,
    side_ok: impl Fn(&[u8]) -> bool,
) -> Result<MultiPop<'_>, String> {
    let numkeys = parse_i64(&args[at])
        .filter(|&n| n >= 1)
        .ok_or("ERR numkeys should be greater than 0")?;
    let side_at = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(at + 1))
        .filter(|&i| i < args.len())
        .ok_or(SYNTAX)?;
    if !side_ok(&args[side_at]) {
        return Err(SYNTAX.to_owned());
    }
    let mut count = None;
    let mut i = side_at + 1;
    while i < args.len() {
        if count.is_none() && args[i].eq_ignore_ascii_case(b"count") && i + 1 < args.len() {
            let c = parse_i64(&args[i + 1])
                .filter(|&c| c >= 1)
                .ok_or("ERR count should be greater than 0")?;
            count = Some(c as u64);
            i += 2;
        } else {
            return Err(SYNTAX.to_owned());
        }
    }
    Ok(MultiPop {
        keys: &args[at + 1..side_at],
        side: &args[side_at],
        count: count.unwrap_or(1),
    })
}

/// `LMPOP numkeys key... LEFT|RIGHT [COUNT n]` and `BLMPOP timeout
/// numkeys ...`: pops from the first non-empty list, replying its name and
/// the elements.
fn mpop(name: &str, args: &[Bytes], txn: &mut Txn<'_>, out: &mut Out) -> CmdResult {
    let blocking = name == "blmpop";
    let at = if blocking { 2 } else { 1 };
    let p = multi_pop_args(args, at, |s| side(s).is_ok())?;
    let left = side(p.side)?;
    if blocking {
        timeout_arg(&args[1])?;
    }
    for key in p.keys {
        if let Some(m) = txn.pop_source(key, LIST)? {
            let v = pop_values(txn, key, m, p.count, left)?;
            out.array(2);
            out.bulk(key);
            out.array(v.len());
            for e in v {
                out.bulk(&e);
            }
            return Ok(());
        }
    }
    if !(blocking && txn.block()) {
        out.null_array();
    }
    Ok(())
}
